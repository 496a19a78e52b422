"""The sim-server's configuration and its command line.

``SimServerConfig`` is the one source of truth: every field is also a CLI
flag (``fault_429`` is ``--fault-429``), ``parse_args`` builds a config from
argv and ``to_argv`` turns a config back into argv (``spawn_sim_server``
uses it to start the subprocess).

Imports nothing from agentrt but errors.
"""

from __future__ import annotations

import argparse
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrt.runtime.kernel._errors import ConfigError

FaultKind = Literal["429", "503", "hang", "cut", "bad_tool_json", "restart"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class SimServerConfig(BaseModel):
    """How the simulated model server behaves.  Defaults: fast, no faults."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Interface to listen on."""
    port: int = Field(default=0, ge=0, le=65535)
    """TCP port; 0 picks a free one (the ready line and ``SimServer.url`` say which)."""
    model: str = "sim"
    """The model name served (``/v1/models``, ``/get_model_info``, replies)."""
    seed: int = 0
    """Seeds replies and fault draws: same seed and requests, same behaviour."""
    ttft_ms: float = Field(default=50.0, ge=0)
    """Simulated time to first token, in milliseconds (before prefill cost)."""
    token_ms: float = Field(default=2.0, ge=0)
    """Simulated time per generated token after the first, in milliseconds."""
    prefill_ms_per_1k: float = Field(default=0.0, ge=0)
    """Extra first-token time per 1,000 prompt tokens NOT served from the prefix
    cache; 0 (default) keeps latency exactly ``ttft_ms`` + tokens x ``token_ms``."""
    stream_tick_ms: float = Field(default=10.0, gt=0)
    """Streamed tokens due within one tick are written together (one write per
    tick per stream keeps 1,000 concurrent streams cheap); total time is unchanged."""
    reply_tokens: int = Field(default=16, ge=1)
    """Length in tokens of free-text replies (capped by the request's max tokens)."""
    reply_tokens_max: int | None = Field(default=None, ge=1)
    """When set, each final reply's length in tokens is drawn between
    ``reply_tokens`` and this (inclusive), per (prompt, seed, sample index),
    so usage varies from request to request but the same request gets the
    same length; in ``answer`` mode filler words come before the
    ``ANSWER:`` line.  ``None`` (default): every reply is ``reply_tokens``
    long (``answer`` mode: just the ``ANSWER:`` line)."""
    tool_rounds: int = Field(default=1, ge=0)
    """When tools are offered, answer with tool calls while the conversation holds
    fewer than this many tool results; then answer in text."""
    parallel_tool_calls: int = Field(default=1, ge=1)
    """Tool calls per tool-calling reply (cycling through the offered tools),
    unless the request sets ``parallel_tool_calls: false``."""
    answer: Literal["text", "answer"] = "text"
    """Final replies: ``text`` = deterministic filler words; ``answer`` =
    ``ANSWER: <value>`` where value is the first ``a+b``/``a-b``/``a*b`` of the
    first user message evaluated, else that message's last word, lowercased."""
    answer_noise: float = Field(default=0.0, ge=0, le=1)
    """Probability that a sample's ANSWER value is wrong (number + 1, or word
    + ``?``); drawn per (prompt, seed, sample index); never at temperature 0."""
    cache_tokens: int = Field(default=1_000_000, ge=1)
    """Prefix-cache capacity in tokens (least recently used leaves evicted)."""
    fault_429: float = Field(default=0.0, ge=0, le=1)
    """Rate of 429 replies with a ``Retry-After`` header."""
    retry_after: float = Field(default=1.0, ge=0)
    """The ``Retry-After`` value in seconds (may be fractional, e.g. ``0.1``)."""
    fault_503: float = Field(default=0.0, ge=0, le=1)
    """Rate of 503 replies."""
    fault_hang: float = Field(default=0.0, ge=0, le=1)
    """Rate of requests accepted and never answered (until the client gives up,
    or ``hang_s`` passes, then the connection is closed)."""
    hang_s: float = Field(default=600.0, gt=0)
    """How long a hung request is held before its connection is closed."""
    fault_cut: float = Field(default=0.0, ge=0, le=1)
    """Rate of replies cut mid-body: streams stop after about half their chunks
    without ``[DONE]``; plain replies send half the declared body; then the
    connection is dropped."""
    fault_bad_tool_json: float = Field(default=0.0, ge=0, le=1)
    """Rate of tool-calling replies whose ``arguments`` are malformed JSON."""
    fault_restart: float = Field(default=0.0, ge=0, le=1)
    """Rate of simulated restarts: the server drops every open connection, stops
    listening for ``restart_down_s`` (connections are refused), then listens
    again on the same port with its caches flushed.  The process keeps running."""
    restart_down_s: float = Field(default=0.5, ge=0)
    """How long a simulated restart keeps the port closed."""
    log_level: str = "WARNING"
    """Log level of the sim-server process (logs go to stderr)."""

    @model_validator(mode="after")
    def _rates_fit(self) -> SimServerConfig:
        if self.reply_tokens_max is not None and self.reply_tokens_max < self.reply_tokens:
            raise ValueError(
                f"reply_tokens_max ({self.reply_tokens_max}) must be >= reply_tokens "
                f"({self.reply_tokens})"
            )
        total = (
            self.fault_429 + self.fault_503 + self.fault_hang + self.fault_cut + self.fault_restart
        )
        if total > 1.0:
            raise ValueError(
                "fault_429 + fault_503 + fault_hang + fault_cut + fault_restart "
                f"must be <= 1 (they are exclusive per request), got {total:g}"
            )
        return self

    def fault_rates(self) -> dict[FaultKind, float]:
        """Rate per fault kind."""
        return {
            "429": self.fault_429,
            "503": self.fault_503,
            "hang": self.fault_hang,
            "cut": self.fault_cut,
            "bad_tool_json": self.fault_bad_tool_json,
            "restart": self.fault_restart,
        }

    def to_argv(self) -> list[str]:
        """The CLI flags that reproduce this config (non-defaults only)."""
        argv: list[str] = []
        defaults = SimServerConfig()
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value != getattr(defaults, name):
                argv += [_flag(name), str(value)]
        return argv


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def build_parser(prog: str = "agentrt sim-server") -> argparse.ArgumentParser:
    """An argparse parser with one flag per ``SimServerConfig`` field."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A simulated OpenAI- and SGLang-compatible model server for tests and "
        "benchmarks (deterministic replies, prefix cache, fault injection).",
    )
    for name, field in SimServerConfig.model_fields.items():
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": field.description}
        choices = get_args(field.annotation)
        # ``int | None`` takes an int (leaving the flag out keeps None).
        numeric = [c for c in (field.annotation, *choices) if c in (int, float)]
        if choices and all(isinstance(c, str) for c in choices):
            kwargs["choices"] = choices
        elif numeric:
            kwargs["type"] = numeric[0]
        parser.add_argument(_flag(name), **kwargs)
    return parser


def parse_args(argv: list[str] | None = None) -> SimServerConfig:
    """Parse sim-server flags into a config; a bad value raises ``ConfigError``
    naming the flag."""
    namespace = build_parser().parse_args(argv)
    given = {k: v for k, v in vars(namespace).items() if v is not None}
    try:
        return SimServerConfig(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][0] if first["loc"] else ""
        where = _flag(str(loc)) if loc else "sim-server flags"
        raise ConfigError(first["msg"], where=where) from exc
