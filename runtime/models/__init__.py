"""Model backends: how agentrt talks to models (runtime floor).

Owns the ``ModelBackend`` protocol and its implementations (OpenAI-compatible
HTTP, SGLang-native, embedded llama.cpp, scripted).  Must not import agents,
tools or aggregators.
"""

from agentrt.runtime.models.base import ModelBackend, StreamDelta

__all__ = ["ModelBackend", "StreamDelta"]
