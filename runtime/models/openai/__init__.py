"""The OpenAI-compatible backend (vLLM, SGLang ``/v1``, llama.cpp servers,
OpenAI): its wire, replies, streams and errors.
"""
