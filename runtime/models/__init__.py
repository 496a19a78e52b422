"""Model backends: how agentrt talks to models (runtime floor).

Owns the ``ModelBackend`` protocol and its implementations: OpenAI-compatible
HTTP (vLLM, SGLang's ``/v1``, llama.cpp servers, OpenAI), SGLang-native
``/generate`` across replicas with prefix affinity, the embedded llama.cpp
model, and managed model-server processes.  The registry picks one by
configuration.  Must not import agents, tools or aggregators.
"""

from agentrt.runtime.models.base import ModelBackend, StreamDelta, backend_concurrency
from agentrt.runtime.models.embedded import EmbeddedBackend, EmbeddedConfig
from agentrt.runtime.models.http import HttpClientConfig
from agentrt.runtime.models.managed import ManagedServer
from agentrt.runtime.models.managed_config import ManagedServerConfig, ManagedServerError
from agentrt.runtime.models.openai import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.models.registry import ModelRegistry, ModelsConfig
from agentrt.runtime.models.retry import BreakerConfig, CircuitBreaker, RetryPolicy
from agentrt.runtime.models.sglang import SGLangBackend, SGLangBackendConfig

__all__ = [
    "BreakerConfig",
    "CircuitBreaker",
    "EmbeddedBackend",
    "EmbeddedConfig",
    "HttpClientConfig",
    "ManagedServer",
    "ManagedServerConfig",
    "ManagedServerError",
    "ModelBackend",
    "ModelRegistry",
    "ModelsConfig",
    "OpenAIBackend",
    "OpenAIBackendConfig",
    "RetryPolicy",
    "SGLangBackend",
    "SGLangBackendConfig",
    "StreamDelta",
    "backend_concurrency",
]
