"""Logging for tests that call the command line's ``main``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentrt.runtime.observe._log import configure_logging, reset_logging


@contextmanager
def warnings_logged() -> Iterator[None]:
    """Logging configured at ``WARNING`` for a test, and reset after it.

    ``main()`` configures logging once per process, against the stderr of
    the moment, and module-level loggers cache that stream on first use.
    Configured here, before capsys swaps in a stream it closes after the
    test, a logger first used in one test never writes to a closed file in
    a later one (``main()``'s output still reaches capsys's stderr)."""
    reset_logging()
    configure_logging("WARNING")
    try:
        yield
    finally:
        reset_logging()
