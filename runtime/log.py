"""Logging: structlog configured once, by the entry point, never on import.

JSON lines when stderr is not a terminal (the daemon, CI), a readable
console renderer when it is.  Library code only calls ``get_logger``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger.  Idempotent: the first
    call wins unless ``force``-style reconfiguration is wanted, in which case
    call :func:`reset_logging` first."""
    global _configured  # noqa: PLW0603 - process-wide logging is process-wide by nature
    if _configured:
        return
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(name)s %(message)s")
    _configured = True


def reset_logging() -> None:
    """Forget the configuration (tests use this)."""
    global _configured  # noqa: PLW0603
    structlog.reset_defaults()
    _configured = False


def get_logger(name: str | None = None, **context: Any) -> Any:
    """A structlog logger carrying ``context`` (e.g. ``run_id``).

    The logger stays lazy: it picks up the configuration current when it
    first logs, so module-level loggers created before
    :func:`configure_logging` still follow it."""
    if name is not None:
        context = {"logger_name": name, **context}
    return structlog.get_logger(**context)
