"""Logging: structlog configured once, by the entry point, never on import.

JSON lines when stderr is not a terminal (the daemon, CI), a readable
console renderer when it is; the standard library's records (third-party
loggers) are rendered the same way.  Library code only calls ``get_logger``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, Final, TextIO, cast, final

# structlog (and rich, which its console renderer imports when installed)
# loads when an entry point configures logging, not with the library: an
# application that embeds agentrt and logs through the standard library
# never pays for it (about 6,500 objects the collector walks, and import time).

_configured = False
_handler: logging.Handler | None = None
"""The root handler ``configure_logging`` installed (``reset_logging`` removes it)."""

#: Loggers of libraries agentrt runs that may come with handlers of their own:
#: their records go through the root handler instead, rendered like agentrt's.
THIRD_PARTY_LOGGERS: Final = (
    "mcp",
    "httpx",
    "httpcore",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "aiohttp",
    "aiohttp.access",
    "aiohttp.server",
    "asyncio",
    "ray",
)


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is *now*: loggers are cached on
    first use, and a stream captured then (a test's capture, a redirected
    stderr) may be closed by the time they log again."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_NOTHING_BOUND: Final[Mapping[str, Any]] = MappingProxyType({})
_bound: Final = contextvars.ContextVar[Mapping[str, Any]](
    "agentrt_log_context", default=_NOTHING_BOUND
)
"""What ``log_context`` bound in the current task (and the tasks it started)."""


def _merge_bound(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: the ``log_context`` values under the record's own."""
    for key, value in _bound.get().items():
        event.setdefault(key, value)
    return event


def _record_name(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A stdlib record's logger name under the key agentrt's own lines use."""
    record = event.get("_record")
    if record is not None:
        event.setdefault("logger_name", record.name)
    return event


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger: every line on stderr,
    agentrt's and every library's (``mcp``, ``httpx``, uvicorn...), is
    rendered the same way: one JSON object per line when ``json`` (default:
    when stderr is not a terminal), else the console renderer.  Idempotent:
    the first call wins; call :func:`reset_logging` first to change it."""
    global _configured, _handler  # noqa: PLW0603 - process-wide logging is process-wide by nature
    if _configured:
        return
    import structlog  # see the note at the imports

    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[Any] = [
        _merge_bound,
        structlog.contextvars.merge_contextvars,  # what an application bound through structlog
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(cast(TextIO, _CurrentStderr()))
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, _record_name, structlog.stdlib.ExtraAdder()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler:  # plain text lines (a basicConfig's)
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in THIRD_PARTY_LOGGERS:
        library = logging.getLogger(name)
        for old in list(library.handlers):
            library.removeHandler(old)
        library.propagate = True
    logging.captureWarnings(True)
    _handler = handler
    _configured = True


def reset_logging() -> None:
    """Forget the configuration (tests use this)."""
    global _configured, _handler  # noqa: PLW0603
    if "structlog" in sys.modules:  # else nothing configured it
        sys.modules["structlog"].reset_defaults()
    if _handler is not None:
        logging.getLogger().removeHandler(_handler)
        _handler = None
    logging.captureWarnings(False)
    _configured = False


class _Logger:
    """A logger for library code.

    Until an entry point calls :func:`configure_logging`, records go to the
    stdlib ``logging`` module (by default only warnings and errors reach
    stderr, and an application's own logging set-up decides the rest), so
    embedding agentrt never prints to stdout.  Once configured, structlog
    renders them.  Binding returns a new logger with more context."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, Any]) -> None:
        self._name = name
        self._context = context

    def bind(self, **context: Any) -> _Logger:
        return _Logger(self._name, {**self._context, **context})

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        if _configured:
            import structlog  # loaded already, by configure_logging

            bound = structlog.get_logger(logger_name=self._name, **self._context)
            getattr(bound, logging.getLevelName(level).lower())(event, **fields)
            return
        std = logging.getLogger(self._name)
        if std.isEnabledFor(level):
            exc_info = fields.pop("exc_info", None)
            context = {**_bound.get(), **self._context, **fields}
            detail = " ".join(f"{k}={v!r}" for k, v in context.items())
            std.log(level, "%s %s", event, detail, exc_info=exc_info)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, {"exc_info": True, **fields})


def log_context(**context: Any) -> contextlib.AbstractContextManager[None]:
    """Bind ``context`` (``run_id``, ``rollout_id``) to every log record of
    the current task and the tasks it starts, for the ``with`` block; the
    values bound before are back afterwards."""
    return _LogContext(context)


@final
class _LogContext:
    """``log_context``'s manager: the variables' tokens, reset on exit (a
    class, not a generator: a rollout keeps one alive for its whole life)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context
        self._token: contextvars.Token[Mapping[str, Any]] | None = None

    def __enter__(self) -> None:
        self._token = _bound.set({**_bound.get(), **self._context})

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _bound.reset(token)


def get_logger(name: str | None = None, **context: Any) -> Any:
    """A logger named ``name`` (a module's ``__name__``) carrying ``context``
    (e.g. ``run_id``).  Safe to create at import time: it follows the
    configuration current when it logs."""
    return _Logger(name or "agentrt", context)
