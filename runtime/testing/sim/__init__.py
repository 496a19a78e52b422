"""The sim-server: a simulated OpenAI- and SGLang-compatible model server
(latency, prefix cache, faults), in-process or as a subprocess.
"""
