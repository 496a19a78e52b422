"""``agentrt.models``: model backends, for applications that build their own.

The ``ModelBackend`` protocol every backend implements, the backends agentrt
ships (OpenAI-compatible HTTP, SGLang-native, the embedded llama.cpp model,
managed model-server processes), the registry that picks one by
configuration, and the retry and HTTP-client settings they take.  Names load
on first use: a process loads the backends it configures, not all of them.
"""

from typing import TYPE_CHECKING, Any

from agentrt.runtime.kernel import _lazy_exports

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

_LAZY = {
    "ModelBackend": "agentrt.runtime.models._backend",
    "StreamDelta": "agentrt.runtime.models._backend",
    "backend_concurrency": "agentrt.runtime.models._backend",
    "ModelRegistry": "agentrt.runtime.models._model_registry",
    "ModelsConfig": "agentrt.runtime.models._model_registry",
    "BreakerConfig": "agentrt.runtime.models._retry",
    "CircuitBreaker": "agentrt.runtime.models._retry",
    "RetryPolicy": "agentrt.runtime.models._retry",
    "EmbeddedBackend": "agentrt.runtime.models.embedded._embedded_backend",
    "EmbeddedConfig": "agentrt.runtime.models.embedded._embedded_backend",
    "HttpClientConfig": "agentrt.runtime.models.http._http_client",
    "make_http_client": "agentrt.runtime.models.http._http_client",
    "ManagedServer": "agentrt.runtime.models.managed._managed_server",
    "ManagedServerConfig": "agentrt.runtime.models.managed._managed_config",
    "ManagedServerError": "agentrt.runtime.models.managed._managed_config",
    "OpenAIBackend": "agentrt.runtime.models.openai._openai_backend",
    "OpenAIBackendConfig": "agentrt.runtime.models.openai._openai_backend",
    "SGLangBackend": "agentrt.runtime.models.sglang._sglang_backend",
    "SGLangBackendConfig": "agentrt.runtime.models.sglang._sglang_backend",
}


def __getattr__(name: str) -> Any:
    return _lazy_exports.load(globals(), _LAZY, name)


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
