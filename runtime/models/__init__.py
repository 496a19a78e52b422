"""Model backends: how agentrt talks to models (runtime floor).

Owns the ``ModelBackend`` protocol and its implementations: OpenAI-compatible
HTTP (vLLM, SGLang's ``/v1``, llama.cpp servers, OpenAI), SGLang-native
``/generate`` across replicas with prefix affinity, the embedded llama.cpp
model, and managed model-server processes.  The registry picks one by
configuration.  Must not import agents, tools or aggregators.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.runtime.models.base import ModelBackend, StreamDelta, backend_concurrency
    from agentrt.runtime.models.embedded import EmbeddedBackend, EmbeddedConfig
    from agentrt.runtime.models.http import HttpClientConfig
    from agentrt.runtime.models.managed import ManagedServer
    from agentrt.runtime.models.managed_config import ManagedServerConfig, ManagedServerError
    from agentrt.runtime.models.openai import OpenAIBackend, OpenAIBackendConfig
    from agentrt.runtime.models.registry import ModelRegistry, ModelsConfig
    from agentrt.runtime.models.retry import BreakerConfig, CircuitBreaker, RetryPolicy
    from agentrt.runtime.models.sglang import SGLangBackend, SGLangBackendConfig

# A process loads the backends it configures, not all of them (the embedded
# model's bindings, aiohttp and httpx are heavy): names load on first use.
_MODULES = {
    "ModelBackend": "base",
    "StreamDelta": "base",
    "backend_concurrency": "base",
    "EmbeddedBackend": "embedded",
    "EmbeddedConfig": "embedded",
    "HttpClientConfig": "http",
    "ManagedServer": "managed",
    "ManagedServerConfig": "managed_config",
    "ManagedServerError": "managed_config",
    "OpenAIBackend": "openai",
    "OpenAIBackendConfig": "openai",
    "ModelRegistry": "registry",
    "ModelsConfig": "registry",
    "BreakerConfig": "retry",
    "CircuitBreaker": "retry",
    "RetryPolicy": "retry",
    "SGLangBackend": "sglang",
    "SGLangBackendConfig": "sglang",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup does not come here
    return value


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
