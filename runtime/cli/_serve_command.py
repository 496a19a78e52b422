"""``agentrt serve``: the daemon's command line.

Owns ``serve_main`` (its own argparse parser; ``agentrt.runtime.cli``
delegates to it): reads and validates ``agentrt.toml`` (``load_config``),
applies the ``--host``/``--port``/``--store`` overrides, configures JSON logs
on stderr, and runs ``run_daemon`` on uvloop until SIGTERM/SIGINT.  Exit codes: 0 after a clean
shutdown, 2 for a bad configuration or address, 1 for other failures.

The roof: may import every layer.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

from agentrt.runtime.cli._flags import add_placement_arguments
from agentrt.runtime.config._config_file import DEFAULT_PORT, load_config
from agentrt.runtime.kernel._errors import AgentrtError, UserError
from agentrt.runtime.kernel._event_loop import run as run_loop
from agentrt.runtime.observe._log import configure_logging
from agentrt.runtime.serve._daemon import run_daemon


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt serve",
        description=(
            "Run the agentrt daemon: the HTTP + SSE API (/v1/runs), an OpenAI-compatible "
            "endpoint (/v1/chat/completions), MCP (/mcp), /metrics and a web page (/)."
        ),
    )
    parser.add_argument(
        "--config", type=Path, help="agentrt.toml (default: the embedded model, no agents)"
    )
    parser.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    parser.add_argument(
        "--store", type=Path, help="the run store's SQLite file (overrides [store])"
    )
    add_placement_arguments(parser)
    parser.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (JSON lines on stderr; default from the config, else INFO)",
    )
    parser.add_argument(
        "--log-format", choices=["json", "console"], default="json", help="log rendering"
    )
    return parser


def serve_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        config = config.with_server(host=args.host, port=args.port).with_store(args.store)
        config = config.with_placement(args.placement, args.ray_address)
        config.server.resolved_token()  # an unset token_env is a configuration error
    except UserError as error:
        print(f"agentrt serve: {error}", file=sys.stderr)
        return 2
    configure_logging(args.log_level or config.log_level, json=args.log_format == "json")
    _tune_process()

    async def main() -> None:
        await run_daemon(config, handle_signals=True, own_gc=True)

    try:
        run_loop(main)
    except UserError as error:
        print(f"agentrt serve: {error}", file=sys.stderr)
        return 2
    except AgentrtError as error:
        print(f"agentrt serve: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _tune_process() -> None:
    """Process-wide settings for the daemon's own process: ``agentrt serve``
    owns it, so it may; ``run_daemon`` in an embedding application changes
    none of them (the application's collector and switch interval are its own).

    A shorter GIL switch interval, the start-up heap frozen out of
    collection, small young generations and no automatic full collection
    (the daemon's ``IdleCollector`` runs them): why, and the pauses measured,
    are in ``docs/design/performance.md``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 5, _NO_AUTOMATIC_FULL_COLLECTION)
    sys.setswitchinterval(0.0005)


_NO_AUTOMATIC_FULL_COLLECTION = 1 << 30
"""Middle collections before an automatic full one: never, in practice."""


__all__ = ["serve_main"]
