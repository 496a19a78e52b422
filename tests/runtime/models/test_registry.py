"""Resolving backends from the ``models`` configuration section."""

from __future__ import annotations

import pytest

from agentrt.protocols import ModelRequest, UserMessage
from agentrt.runtime.kernel._errors import ConfigError, UnknownModelError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._model_registry import BACKEND_KINDS, ModelRegistry, ModelsConfig
from agentrt.runtime.models.embedded._embedded_backend import (
    DEFAULT_MODEL_NAME,
    EmbeddedBackend,
    EmbeddedConfig,
)


def test_nothing_configured_means_the_embedded_model() -> None:
    registry = ModelRegistry()
    assert registry.backend_names() == ["embedded"]
    assert registry.resolve() == ("embedded", DEFAULT_MODEL_NAME)
    assert registry.resolve(DEFAULT_MODEL_NAME) == ("embedded", DEFAULT_MODEL_NAME)
    backend = registry.create()
    assert isinstance(backend, EmbeddedBackend)
    assert isinstance(backend, ModelBackend)
    assert backend.models == [DEFAULT_MODEL_NAME]


def test_named_backends_resolve_by_backend_or_model_name() -> None:
    registry = ModelRegistry.from_mapping(
        {
            "default": "local",
            "backends": {
                "vllm": {
                    "kind": "openai",
                    "base_url": "http://127.0.0.1:9/v1",
                    "models": ["smol", "big"],
                },
                "local": {"kind": "embedded", "model": "tiny", "n_threads": 1},
            },
        }
    )
    assert registry.backend_names() == ["vllm", "local"]
    assert registry.default == "local"
    assert registry.resolve() == ("local", "tiny")
    assert registry.resolve("big") == ("vllm", "big")
    assert registry.resolve("vllm") == ("vllm", "smol")
    local = registry.create()
    assert isinstance(local, EmbeddedBackend)
    # The key names the backend unless its options say otherwise.
    assert local.name == "local"
    assert local.config == EmbeddedConfig(name="local", model="tiny", n_threads=1)
    remote = registry.create("big")
    assert remote.name == "vllm"
    assert remote.models == ["smol", "big"]


def test_an_unknown_model_names_what_is_configured() -> None:
    registry = ModelRegistry(
        ModelsConfig.model_validate({"backends": {"a": {"kind": "embedded", "model": "m1"}}})
    )
    with pytest.raises(UnknownModelError, match=r"'nope'.*models\.backends: a: m1"):
        registry.create("nope")


@pytest.mark.parametrize(
    ("section", "where", "what"),
    [
        (
            {"backends": {"x": {"kind": "llamafile"}}},
            "models.backends.x.kind",
            "unknown backend kind",
        ),
        ({"backends": {"x": {}}}, "models.backends.x.kind", "Field required"),
        (
            {"backends": {"x": {"kind": "embedded", "n_ctx": "big"}}},
            "models.backends.x.n_ctx",
            "integer",
        ),
        (
            {"backends": {"x": {"kind": "embedded", "colour": 1}}},
            "models.backends.x.colour",
            "Extra",
        ),
        ({"backends": {"x": {"kind": "openai", "base_url": "ftp://h"}}}, "models.backends.x", ""),
        ({"default": "ghost"}, "models.default", "ghost"),
        ({"backend": {}}, "models.backend", "Extra"),
    ],
)
def test_malformed_configuration_is_one_error_naming_the_key(
    section: dict[str, object], where: str, what: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelRegistry.from_mapping(section)
    assert caught.value.where.startswith(where)
    assert what in str(caught.value)
    assert "\n" not in str(caught.value)


def test_every_kind_is_known() -> None:
    assert set(BACKEND_KINDS) == {"embedded", "openai", "sglang", "scripted"}
    assert ModelRegistry.from_mapping({"backends": {"b": {"kind": "embedded"}}}).resolve() == (
        "b",
        DEFAULT_MODEL_NAME,
    )


@pytest.mark.parametrize("kind", ["openai", "sglang", "scripted"])
def test_kinds_that_need_options_say_where(kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelRegistry.from_mapping({"backends": {"b": {"kind": kind}}})
    assert caught.value.where.startswith("models.backends.b")


def test_a_kind_missing_from_this_build_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.runtime.models import _model_registry as registry_module

    ghost = registry_module._Kind(
        "ghost", "agentrt.runtime.models.no_such_backend", "GhostConfig", lambda m, c: m
    )
    monkeypatch.setitem(registry_module._KINDS, "ghost", ghost)
    with pytest.raises(ConfigError, match="backend kind 'ghost' is not available in this build"):
        ModelRegistry.from_mapping({"backends": {"g": {"kind": "ghost"}}})


@pytest.mark.anyio
async def test_scripted_kind_answers_from_configuration() -> None:
    registry = ModelRegistry.from_mapping(
        {"backends": {"fake": {"kind": "scripted", "replies": ["one", "two"], "models": ["m"]}}}
    )
    async with registry.create("m") as backend:
        request = ModelRequest(messages=[UserMessage(content="hi")], model="m")
        texts = [(await backend.complete(request)).message.content for _ in range(3)]
    assert backend.name == "fake"
    assert texts == ["one", "two", "one"]  # cycles by default


def test_built_backends_satisfy_the_protocol_statically() -> None:
    # mypy checks these assignments; isinstance checks the runtime protocol.
    embedded: ModelBackend = EmbeddedBackend()
    assert isinstance(embedded, ModelBackend)
