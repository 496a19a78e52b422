"""The sim-server command line: ``python -m agentrt.runtime.testing.sim._sim_server``
(``main``, which ``agentrt sim-server`` calls).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys

import anyio

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import configure_logging, get_logger
from agentrt.runtime.testing.sim._sim_config import SimServerConfig, build_parser, parse_args
from agentrt.runtime.testing.sim._sim_runner import READY_PREFIX, SimServer

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
    """The ``agentrt sim-server`` command; returns the exit code.

    Flags: one per ``SimServerConfig`` field plus ``--exit-with-parent``.
    Prints exactly one line when ready
    (``agentrt sim-server listening on http://HOST:PORT``) and serves until
    SIGTERM or SIGINT (0).  A bad flag exits 2 naming it; a port that
    cannot be bound exits 1.  Tunes the garbage collector for its load
    (freezes the start-up heap, raises thresholds: collections took about
    a third of its CPU at 1,000 concurrent requests)."""
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
