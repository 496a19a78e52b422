"""Model backends: how agentrt talks to models (runtime floor).

Owns the ``ModelBackend`` protocol and its implementations: OpenAI-compatible
HTTP (vLLM, SGLang's ``/v1``, llama.cpp servers, OpenAI), SGLang-native
``/generate`` across replicas with prefix affinity, the embedded llama.cpp
model, and managed model-server processes.  The registry picks one by
configuration.  Must not import agents, tools or aggregators.
"""
