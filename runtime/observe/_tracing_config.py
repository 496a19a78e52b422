"""``[tracing]``: where a Runtime exports its runs as OpenTelemetry traces.

Owns ``TracingConfig`` (pydantic, user facing) and ``resolve_tracing``,
which merges it with the standard ``OTEL_*`` environment variables into
the settings an exporter is built from (or ``None``: tracing is off).
Plain data: must not import OpenTelemetry (that is ``runtime.tracing``, the
``otel`` extra) nor agents, tools or aggregators.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from agentrt.runtime.kernel._errors import ConfigError

if TYPE_CHECKING:
    from agentrt.runtime.observe._tracing import RunTracer

Protocol = Literal["http/protobuf", "grpc"]
_PROTOCOLS: Final = ("http/protobuf", "grpc")


class TracingConfig(BaseModel):
    """``[tracing]``: OpenTelemetry export of every run as one trace (run,
    rollouts, steps, model calls, tool calls, judges, aggregation).  Off
    unless an endpoint is set here or in ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; keys set here win over the
    ``OTEL_*`` variables."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enabled: bool | None = None
    """``false``: never export, whatever the environment says; ``None``:
    export when an endpoint is configured."""
    endpoint: str | None = None
    """The OTLP receiver: for ``http/protobuf`` the traces URL
    (``http://127.0.0.1:4318/v1/traces``; a URL with no path gets
    ``/v1/traces``), for ``grpc`` ``host:port``."""
    protocol: Protocol | None = None
    """``http/protobuf`` (default) or ``grpc`` (needs
    ``opentelemetry-exporter-otlp-proto-grpc``); else ``OTEL_EXPORTER_OTLP_PROTOCOL``."""
    service_name: str | None = None
    """The ``service.name`` resource attribute; else ``OTEL_SERVICE_NAME``, else ``agentrt``."""
    sample_ratio: float | None = Field(default=None, ge=0, le=1)
    """The share of runs traced (whole traces: a run's spans follow its
    root's decision); else ``OTEL_TRACES_SAMPLER_ARG``, else 1."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every export (an API key); ``OTEL_EXPORTER_OTLP_HEADERS`` adds to them."""
    max_queue_spans: int = Field(default=4096, ge=1)
    """Spans waiting for export at most; past it new spans are dropped and
    counted (a receiver that is down never holds a run up)."""
    export_timeout_s: float = Field(default=5.0, gt=0)
    """Deadline of one export request (and of the last flush when the Runtime closes)."""


class TracingSettings(NamedTuple):
    """``TracingConfig`` merged with the environment: what the exporter uses."""

    endpoint: str
    protocol: Protocol
    service_name: str
    sample_ratio: float
    headers: dict[str, str]
    max_queue_spans: int
    export_timeout_s: float


def _env_endpoint(env: Mapping[str, str]) -> str | None:
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base or None


def _http_traces_url(endpoint: str) -> str:
    """A URL with no path is a receiver's base address: add ``/v1/traces``."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ConfigError(
            f"{endpoint!r} is not an http(s) URL (protocol http/protobuf)",
            where="tracing.endpoint",
        )
    _, slash, path = rest.partition("/")
    return endpoint if slash and path else endpoint.rstrip("/") + "/v1/traces"


def _env_headers(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    headers: dict[str, str] = {}
    for item in raw.split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip():
            headers[key.strip()] = value.strip()
    return headers


def resolve_tracing(
    config: TracingConfig, env: Mapping[str, str] | None = None
) -> TracingSettings | None:
    """The exporter's settings, or ``None`` when tracing is off (no endpoint,
    ``enabled = false`` or ``OTEL_SDK_DISABLED=true`` / ``OTEL_TRACES_EXPORTER=none``).
    Raises ``ConfigError`` naming the key or variable for a bad value."""
    env = os.environ if env is None else env
    if config.enabled is False:
        return None
    if config.enabled is None and (
        env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        or env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none"
    ):
        return None
    endpoint = config.endpoint or _env_endpoint(env)
    if endpoint is None:
        if config.enabled:
            raise ConfigError(
                "tracing is enabled but no endpoint is set (tracing.endpoint or "
                "OTEL_EXPORTER_OTLP_ENDPOINT)",
                where="tracing.enabled",
            )
        return None
    protocol = config.protocol or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or None
    if protocol is None:
        protocol = "http/protobuf"
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"protocol {protocol!r}: expected one of {', '.join(_PROTOCOLS)}",
            where="tracing.protocol" if config.protocol else "OTEL_EXPORTER_OTLP_PROTOCOL",
        )
    ratio = config.sample_ratio
    if ratio is None:
        raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        try:
            ratio = float(raw) if raw else 1.0
        except ValueError:
            raise ConfigError(f"{raw!r} is not a number", where="OTEL_TRACES_SAMPLER_ARG") from None
        if not 0 <= ratio <= 1:
            raise ConfigError(f"{ratio} is not in [0, 1]", where="OTEL_TRACES_SAMPLER_ARG")
    return TracingSettings(
        endpoint=_http_traces_url(endpoint) if protocol == "http/protobuf" else endpoint,
        protocol=protocol,  # type: ignore[arg-type]  # checked against _PROTOCOLS above
        service_name=config.service_name or env.get("OTEL_SERVICE_NAME", "").strip() or "agentrt",
        sample_ratio=ratio,
        headers={**_env_headers(env), **config.headers},
        max_queue_spans=config.max_queue_spans,
        export_timeout_s=config.export_timeout_s,
    )


def open_tracer(config: TracingConfig) -> RunTracer | None:
    """A ``RunTracer`` for ``config`` and the environment, or ``None`` when
    tracing is off (then nothing of OpenTelemetry is imported).  Raises
    ``ConfigError`` for a bad setting or when the ``otel`` extra is missing."""
    settings = resolve_tracing(config)
    if settings is None:
        return None
    try:
        from agentrt.runtime.observe._tracing import RunTracer
    except ImportError as error:
        raise ConfigError(
            f"tracing needs the otel extra (pip install 'agentrt[otel]'): {error}",
            where="tracing",
        ) from None
    return RunTracer(settings)


__all__ = ["TracingConfig", "TracingSettings", "open_tracer", "resolve_tracing"]
