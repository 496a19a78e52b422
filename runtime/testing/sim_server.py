"""The sim-server command line: ``python -m agentrt.runtime.testing.sim_server``.

``main(argv)`` is what ``agentrt sim-server`` calls.  Flags: one per
``SimServerConfig`` field (``--port``, ``--host``, ``--ttft-ms``,
``--token-ms``, ``--fault-429`` ... see ``--help``) plus
``--exit-with-parent``.  It prints exactly one line to stdout when ready::

    agentrt sim-server listening on http://127.0.0.1:PORT

and serves until SIGTERM or SIGINT (exit code 0).  Logs go to stderr.

Being a process of its own, it tunes the garbage collector for its load:
many short-lived objects per request next to large long-lived caches (the
radix tree).  With the default thresholds, collections took about a third
of its CPU at 1,000 concurrent requests; ``main`` freezes the start-up
heap and raises the thresholds (``SimServer`` in-process never does).  A
bad flag value exits with code 2 and a message naming the flag; a port
that cannot be bound exits with code 1.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys

import anyio

from agentrt.runtime.errors import ConfigError
from agentrt.runtime.log import configure_logging, get_logger
from agentrt.runtime.testing.sim_config import SimServerConfig, build_parser, parse_args
from agentrt.runtime.testing.sim_runner import READY_PREFIX, SimServer

log = get_logger("agentrt.sim_server")


async def _watch_parent(scope: anyio.CancelScope) -> None:
    parent = os.getppid()
    # Polling: an orphaned process is re-parented, nothing signals it.
    while os.getppid() == parent:  # noqa: ASYNC110
        await anyio.sleep(0.5)
    with contextlib.suppress(OSError):  # stderr may have gone with the parent
        log.warning("sim_parent_gone", parent=parent)
    scope.cancel()


async def _serve(config: SimServerConfig, exit_with_parent: bool) -> None:
    async with SimServer(config) as server, anyio.create_task_group() as tg:
        print(READY_PREFIX + server.url, flush=True)  # the CLI's one line of output
        if exit_with_parent:
            tg.start_soon(_watch_parent, tg.cancel_scope)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                tg.cancel_scope.cancel()
                break


def _parser() -> argparse.ArgumentParser:
    parser = build_parser()
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the parent process goes away (agentrt.testing's starters set this)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``agentrt sim-server`` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    exit_with_parent = _parser().parse_args(args).exit_with_parent
    args = [a for a in args if a != "--exit-with-parent"]
    try:
        config = parse_args(args)
    except ConfigError as exc:
        print(f"agentrt sim-server: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        import uvloop  # noqa: F401

        options = {"use_uvloop": True}
    except ImportError:
        options = {}
    try:
        anyio.run(_serve, config, exit_with_parent, backend="asyncio", backend_options=options)
    except OSError as exc:
        print(
            f"agentrt sim-server: cannot listen on {config.host}:{config.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
