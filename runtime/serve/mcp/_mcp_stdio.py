"""``agentrt mcp``: the daemon's MCP server over stdio, for IDEs that launch a
command instead of connecting to a URL (``serve_mcp_stdio``, ``mcp_main``).
stdout carries the protocol and nothing else.

The roof: may import every layer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from agentrt.runtime.config._config_file import AgentrtConfig, load_config
from agentrt.runtime.kernel._errors import AgentrtError, UserError
from agentrt.runtime.kernel._event_loop import run as run_loop
from agentrt.runtime.models._backend import ModelBackend
from agentrt.runtime.observe._log import configure_logging, get_logger
from agentrt.runtime.serve._run_manager import RunManager
from agentrt.runtime.serve.mcp._mcp_server import build_mcp_server
from agentrt.tools._tool import Tool
from agentrt.tools.hosting._transports import serve_stdio

log = get_logger(__name__)

_PROG = "agentrt mcp"
_DESCRIPTION = (
    "Serve agentrt over MCP on stdin/stdout, for IDEs and MCP clients that launch a "
    "command: tools run_agent, list_agents, get_run and cancel_run; runs, trajectories and "
    "summaries as resources.  Uses the configuration file and run store of `agentrt serve`."
)


async def serve_mcp_stdio(
    config: AgentrtConfig,
    *,
    backends: Sequence[ModelBackend] | Mapping[str, ModelBackend] = (),
    tools: Sequence[Tool] | None = None,
    stdin: anyio.AsyncFile[str] | None = None,
    stdout: anyio.AsyncFile[str] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one MCP client over stdio (the process's own unless given) with
    a ``RunManager`` in this process (the same configuration and run store
    as ``agentrt serve``); stray writes to stdout go to stderr meanwhile.
    When the client closes its end, drain: runs still going get
    ``server.shutdown_grace_s`` to finish; the rest stay unfinished in the
    store and resume when a daemon (or this command) next opens it."""
    async with RunManager(config, backends=backends, tools=tools) as manager:
        server = build_mcp_server(manager)
        log.info("mcp_stdio_serving", store=str(config.store.path), resumed=len(manager.resumed))
        try:
            await serve_stdio(server, stdin=stdin, stdout=stdout, task_status=task_status)
        finally:
            with anyio.CancelScope(shield=True):
                stopped = await manager.drain(config.server.shutdown_grace_s)
        log.info("mcp_stdio_stopped", checkpointed_runs=len(stopped))


def build_parser(prog: str = _PROG) -> argparse.ArgumentParser:
    """The ``agentrt mcp`` parser."""
    parser = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    parser.add_argument(
        "--config", type=Path, help="agentrt.toml (default: the embedded model, no agents)"
    )
    parser.add_argument(
        "--store", type=Path, help="the run store's SQLite file (overrides [store])"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (JSON lines on stderr; default WARNING)",
    )
    return parser


def mcp_main(argv: list[str]) -> int:
    """``agentrt mcp ARGS`` (the CLI delegates here); returns the exit code:
    0 when the client closed the connection, 2 for a bad configuration, 1
    for other failures.  Logs go to stderr."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config).with_store(args.store)
    except UserError as error:
        _problem(str(error))
        return 2
    configure_logging(args.log_level, json=True)
    try:
        run_loop(lambda: serve_mcp_stdio(config))
    except UserError as error:
        _problem(str(error))
        return 2
    except AgentrtError as error:
        _problem(str(error))
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _problem(text: str) -> None:
    # stderr: stdout belongs to the protocol.
    print(f"{_PROG}: {' '.join(text.split())}", file=sys.stderr)


__all__ = ["build_parser", "mcp_main", "serve_mcp_stdio"]
