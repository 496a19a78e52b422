"""``agentrt.models``: model backends, for applications that build their own.

The ``ModelBackend`` protocol every backend implements, the backends agentrt
ships (OpenAI-compatible HTTP, SGLang-native, the embedded llama.cpp model,
managed model-server processes), the registry that picks one by
configuration, and the retry and HTTP-client settings they take.  Names load
on first use: a process loads the backends it configures, not all of them.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.runtime.models._backend import ModelBackend, StreamDelta, backend_concurrency
    from agentrt.runtime.models._model_registry import ModelRegistry, ModelsConfig
    from agentrt.runtime.models._retry import BreakerConfig, CircuitBreaker, RetryPolicy
    from agentrt.runtime.models.embedded._embedded_backend import EmbeddedBackend, EmbeddedConfig
    from agentrt.runtime.models.http._http_client import HttpClientConfig, make_http_client
    from agentrt.runtime.models.managed._managed_config import (
        ManagedServerConfig,
        ManagedServerError,
    )
    from agentrt.runtime.models.managed._managed_server import ManagedServer
    from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
    from agentrt.runtime.models.sglang._sglang_backend import SGLangBackend, SGLangBackendConfig

_MODULES = {
    "ModelBackend": "_backend",
    "StreamDelta": "_backend",
    "backend_concurrency": "_backend",
    "ModelRegistry": "_model_registry",
    "ModelsConfig": "_model_registry",
    "BreakerConfig": "_retry",
    "CircuitBreaker": "_retry",
    "RetryPolicy": "_retry",
    "EmbeddedBackend": "embedded._embedded_backend",
    "EmbeddedConfig": "embedded._embedded_backend",
    "HttpClientConfig": "http._http_client",
    "make_http_client": "http._http_client",
    "ManagedServer": "managed._managed_server",
    "ManagedServerConfig": "managed._managed_config",
    "ManagedServerError": "managed._managed_config",
    "OpenAIBackend": "openai._openai_backend",
    "OpenAIBackendConfig": "openai._openai_backend",
    "SGLangBackend": "sglang._sglang_backend",
    "SGLangBackendConfig": "sglang._sglang_backend",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"agentrt.runtime.models.{module}"), name)
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
    "make_http_client",
]
