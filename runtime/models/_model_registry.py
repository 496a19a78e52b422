"""Which backend serves which model, from configuration (runtime floor):
``ModelsConfig`` (the ``models`` section) and ``ModelRegistry``.  A backend
class is imported only when its kind is configured, so the embedded model
needs no HTTP stack and an HTTP-only deployment no llama.cpp.

Must not import agents, tools or aggregators.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt.runtime.kernel._address import validate_name
from agentrt.runtime.kernel._errors import ConfigError, UnknownModelError
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.models._model_reference import pick_backend
from agentrt.runtime.models.managed._managed_config import ManagedServerConfig
from agentrt.runtime.models.managed._process_group import free_port

__all__ = [
    "BACKEND_KINDS",
    "DEFAULT_BACKEND_NAME",
    "BackendEntry",
    "ModelRegistry",
    "ModelsConfig",
    "ScriptedBackendConfig",
]

#: The backend a registry with no configured backends provides.
DEFAULT_BACKEND_NAME: Final = "embedded"


class BackendEntry(BaseModel):
    """One named backend: its kind plus that kind's own options (validated
    by the kind's configuration class, e.g. ``EmbeddedConfig``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str
    """One of ``embedded``, ``openai``, ``sglang``, ``scripted``."""
    managed: dict[str, Any] | None = None
    """For ``openai`` and ``sglang``: the model server agentrt starts and
    keeps up for this backend (the fields of ``ManagedServerConfig``; its
    ``name`` defaults to the backend's, and a free port is picked when it
    gives none).  The backend's ``base_url`` / ``urls`` are derived from it,
    and its ``models`` / ``model`` default to the server's served name."""

    def options(self) -> dict[str, Any]:
        """Everything but ``kind`` and ``managed``."""
        return dict(self.model_extra or {})


class ModelsConfig(BaseModel):
    """The ``models`` section of agentrt's configuration: named backends,
    each ``{kind: embedded | openai | sglang | scripted, ...options}``; an
    ``openai`` or ``sglang`` one may say ``managed = {...}`` (agentrt runs
    that server; the backend's URL, and unless given its model, come from
    it).  With nothing configured the embedded SmolLM2 model is the
    default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: str | None = None
    """The backend or model used when a request names none; by default the
    first configured backend, or the embedded model when none is."""
    backends: dict[str, BackendEntry] = Field(default_factory=dict)
    """Backends by name.  A model reference (``default``, ``--model``, an
    agent's ``model``) means the backend of that name, else the one backend
    serving a model of that name; a name two backends serve is an error."""


class ScriptedBackendConfig(BaseModel):
    """A scripted in-process backend (``agentrt.runtime.testing._scripted``):
    canned text replies, for tests and demos that must not need a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "scripted"
    """The backend's name in logs and routing records."""
    models: list[str] = Field(default_factory=lambda: ["scripted"], min_length=1)
    """Model names it answers to."""
    replies: list[str] = Field(min_length=1)
    """The replies, one per sample, in order."""
    on_exhausted: Literal["raise", "repeat_last", "cycle"] = "cycle"
    """What happens after the last reply: fail, repeat it, or start over."""
    latency_s: float = Field(default=0.0, ge=0.0)
    """Simulated latency of each call."""


@dataclass(frozen=True, slots=True)
class _Kind:
    """How to configure and build one kind of backend; ``module`` is
    imported only when a configuration uses the kind."""

    name: str
    module: str
    config_class: str | type[BaseModel]
    """A class name in ``module``, or a class defined here."""
    build: Callable[[Any, Any], ModelBackend]
    """``(module, config) -> backend``."""


def _construct(class_name: str) -> Callable[[Any, Any], ModelBackend]:
    def build(module: Any, config: Any) -> ModelBackend:
        backend: ModelBackend = getattr(module, class_name)(config)
        return backend

    return build


def _build_scripted(module: Any, config: ScriptedBackendConfig) -> ModelBackend:
    backend: ModelBackend = module.ScriptedBackend(
        list(config.replies),
        name=config.name,
        models=config.models,
        latency_s=config.latency_s,
        on_exhausted=config.on_exhausted,
    )
    return backend


def _served_models(config: Any) -> list[str]:
    models = getattr(config, "models", None)
    if isinstance(models, list):
        return [str(m) for m in models]
    model = getattr(config, "model", None)
    return [str(model)] if model else []


_KINDS: Final[dict[str, _Kind]] = {
    kind.name: kind
    for kind in (
        _Kind(
            "embedded",
            "agentrt.runtime.models.embedded._embedded_backend",
            "EmbeddedConfig",
            _construct("EmbeddedBackend"),
        ),
        _Kind(
            "openai",
            "agentrt.runtime.models.openai._openai_backend",
            "OpenAIBackendConfig",
            _construct("OpenAIBackend"),
        ),
        _Kind(
            "sglang",
            "agentrt.runtime.models.sglang._sglang_backend",
            "SGLangBackendConfig",
            _construct("SGLangBackend"),
        ),
        _Kind(
            "scripted",
            "agentrt.runtime.testing._scripted",
            ScriptedBackendConfig,
            _build_scripted,
        ),
    )
}

#: Every backend kind a configuration may name.
BACKEND_KINDS: Final = tuple(_KINDS)


@dataclass(frozen=True, slots=True)
class _Resolved:
    name: str
    kind: _Kind
    config: Any
    models: list[str]
    managed: ManagedServerConfig | None = None


@final
class ModelRegistry:
    """Validated backends by name; ``create`` builds an unopened backend.

    Every configuration error is raised here, at construction, as one
    ``ConfigError`` naming the key (``where``) that is wrong."""

    def __init__(self, config: ModelsConfig | None = None, *, where: str = "models") -> None:
        config = config or ModelsConfig()
        self._where = where
        entries = dict(config.backends) or {DEFAULT_BACKEND_NAME: BackendEntry(kind="embedded")}
        self._backends = {
            name: _resolve_entry(name, entry, f"{where}.backends.{name}")
            for name, entry in entries.items()
        }
        self._default = config.default or next(iter(self._backends))
        try:
            self._lookup(self._default)
        except UnknownModelError as error:
            raise ConfigError(str(error), where=f"{where}.default") from error

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any] | None, *, where: str = "models"
    ) -> ModelRegistry:
        """Validate a raw ``models`` section (from TOML, JSON, a dict)."""
        try:
            config = ModelsConfig.model_validate(dict(data or {}))
        except ValidationError as error:
            raise _config_error(error, where) from None
        return cls(config, where=where)

    @property
    def default(self) -> str:
        """The backend used when a request names no model."""
        return self._default

    def backend_names(self) -> list[str]:
        return list(self._backends)

    def managed_servers(self) -> dict[str, ManagedServerConfig]:
        """The model servers agentrt must run, by the name of the backend
        that needs each, in configuration order.  Start each (e.g.
        ``spawn_managed_server(system, config)``) before opening its backend;
        the backend already points at the server's host and port."""
        return {
            name: resolved.managed
            for name, resolved in self._backends.items()
            if resolved.managed is not None
        }

    def models_of(self, backend: str) -> list[str]:
        """The model names the backend called ``backend`` serves."""
        return list(self._lookup(backend).models)

    def resolve(self, model: str | None = None) -> tuple[str, str | None]:
        """(backend name, model name) for a requested ``model``: the backend
        named so, else the one serving a model of that name (two serving it
        is a ``ConfigError`` naming both).  The model name is ``None`` when
        the backend should pick its own default."""
        wanted = model or self._default
        resolved = self._lookup(wanted)
        if wanted in resolved.models:
            return resolved.name, wanted
        return resolved.name, (resolved.models[0] if resolved.models else None)

    def create(self, model: str | None = None) -> ModelBackend:
        """A new, unopened backend serving ``model`` (default: the default);
        the caller opens and closes it (``async with``)."""
        resolved = self._lookup(model or self._default)
        module = _import_kind(resolved.kind, f"{self._where}.backends.{resolved.name}")
        return resolved.kind.build(module, resolved.config)

    def _lookup(self, wanted: str) -> _Resolved:
        served_by = {name: resolved.models for name, resolved in self._backends.items()}
        name = pick_backend(served_by, wanted, where=f"{self._where}.default")
        if name is not None:
            return self._backends[name]
        served = "; ".join(
            f"{name}: {', '.join(r.models) or '(any)'}" for name, r in self._backends.items()
        )
        raise UnknownModelError(
            f"no configured backend is named or serves model {wanted!r} "
            f"(configured in {self._where}.backends: {served})"
        )


def _resolve_entry(name: str, entry: BackendEntry, where: str) -> _Resolved:
    kind = _KINDS.get(entry.kind)
    if kind is None:
        raise ConfigError(
            f"unknown backend kind {entry.kind!r}; expected one of {', '.join(BACKEND_KINDS)}",
            where=f"{where}.kind",
        )
    module = _import_kind(kind, where)
    config_class: type[BaseModel] = (
        getattr(module, kind.config_class)
        if isinstance(kind.config_class, str)
        else kind.config_class
    )
    options = entry.options()
    managed = None
    if entry.managed is not None:
        managed = _managed_server(name, kind.name, entry.managed, f"{where}.managed")
        options = _point_at(managed, kind.name, options, where)
    if "name" in config_class.model_fields:
        options.setdefault("name", name)
    try:
        config = config_class.model_validate(options)
    except ValidationError as error:
        raise _config_error(error, where) from None
    return _Resolved(
        name=name, kind=kind, config=config, models=_served_models(config), managed=managed
    )


#: Backend kinds that talk to a model server over HTTP, so may have a managed one.
_SERVER_KINDS: Final = ("openai", "sglang")


def _managed_server(
    backend: str, kind: str, options: Mapping[str, Any], where: str
) -> ManagedServerConfig:
    """The managed server of a backend, with a port fixed now (so that the
    backend and the server agree on it)."""
    if kind not in _SERVER_KINDS:
        raise ConfigError(
            f"a {kind!r} backend cannot have a managed server "
            f"(only {' and '.join(_SERVER_KINDS)} backends talk to one)",
            where=where,
        )
    try:
        config = ManagedServerConfig.model_validate({"name": backend, **options})
    except ValidationError as error:
        raise _config_error(error, where) from None
    try:
        validate_name(config.name)  # it names the server's actor too
    except ValueError as error:
        raise ConfigError(str(error), where=f"{where}.name") from None
    if config.port is None:
        config = config.model_copy(update={"port": free_port(config.host)})
    return config


def _point_at(
    server: ManagedServerConfig, kind: str, options: dict[str, Any], where: str
) -> dict[str, Any]:
    """The backend's options aimed at its managed server."""
    url_key, model_key = ("base_url", "models") if kind == "openai" else ("urls", "model")
    if url_key in options:
        raise ConfigError(
            f"{url_key} comes from the managed server (its host and port); remove it",
            where=f"{where}.{url_key}",
        )
    base_url = server.base_url()
    served = server.served_model_name or server.model
    if kind == "openai":
        options = {**options, "base_url": base_url + "/v1"}
        if served:
            options.setdefault(model_key, [served])
    else:
        options = {**options, "urls": [base_url]}
        if served:
            options.setdefault(model_key, served)
    return options


def _import_kind(kind: _Kind, where: str) -> Any:
    try:
        return importlib.import_module(kind.module)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if kind.module == missing or kind.module.startswith(missing + "."):
            raise ConfigError(
                f"backend kind {kind.name!r} is not available in this build", where=where
            ) from error
        raise ConfigError(
            f"backend kind {kind.name!r} needs {error.name!r}, which is not installed",
            where=where,
        ) from error


def _config_error(error: ValidationError, where: str) -> ConfigError:
    """The first validation problem, as one line naming its key."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    key = f"{where}.{location}" if location else where
    more = error.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return ConfigError(f"{first['msg']}{suffix}", where=key)
