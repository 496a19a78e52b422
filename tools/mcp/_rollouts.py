"""``RolloutConnections``: a ``per_rollout`` server's connections of their
own, one per rollout, each offering as roots that rollout's workspace (and
the configured roots, and what the rollout added) and nothing of any other
rollout's.

A connection starts when its rollout first calls the server and is closed
when the rollout (or its run) ends.  A rollout is its top-level rollout
(``rollout_key``: sub-agent calls and a restarted incarnation share it, as
they share its workspace).  Must not import agents or aggregators.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

import anyio

from agentrt.runtime.kernel._errors import AgentrtError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools._tool import NotificationSink
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._pinning import PinStore
from agentrt.tools.mcp._server_requests import McpClientHooks
from agentrt.tools.sandbox._workspaces import Workspaces, rollout_key

__all__ = ["RolloutConnections", "start_deadline_s"]

_log = get_logger(__name__)

#: Owners of a rollout connection's roots (``ServerRequestHandler.set_roots``).
_WORKSPACE: Final = "workspace"
_ADDED: Final = "added"
#: How long closing a connection may take before it is left to its task.
_CLOSE_S: Final = 10.0
#: Past connecting and listing, before a start counts as hung.
_START_SLACK_S: Final = 5.0

#: Starts a task that lives as long as its owner (the actor's services).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]


def start_deadline_s(config: StdioServerConfig | HttpServerConfig) -> float:
    """How long starting one connection may take: the handshake, the tool
    listing, a person approving OAuth access."""
    wait = config.authorization_wait_s() if isinstance(config, HttpServerConfig) else 0.0
    return config.connect_timeout_s + config.request_timeout_s + wait + _START_SLACK_S


@dataclass(eq=False)
class _Slot:
    """One rollout's connection: starting, open, or ended."""

    run_id: str
    rollout_id: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ready: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    connection: McpConnection | None = None
    error: str = ""


@final
class RolloutConnections:
    """The connections of one ``per_rollout`` server, by rollout.

    ``spawn`` runs each connection's holding task (an actor's services, or
    a task group's ``start_soon``).  A rollout's directory is found under
    ``config.workspace_root`` (and created on first use, as the ``shell``
    and ``editor`` do); it is never deleted here: it belongs to the tools
    that write it."""

    def __init__(
        self,
        config: StdioServerConfig | HttpServerConfig,
        *,
        spawn: Spawn,
        pins: PinStore,
        on_notification: NotificationSink | None = None,
        hooks: McpClientHooks | None = None,
    ) -> None:
        self._config = config
        self._spawn = spawn
        self._pins = pins
        self._sink = on_notification
        self._hooks = hooks
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._added: dict[tuple[str, str], tuple[Path, ...]] = {}

    def __len__(self) -> int:
        """Connections open or starting."""
        return len(self._slots)

    def _key(self, run_id: str, rollout_id: str) -> tuple[str, str]:
        return run_id, rollout_key(run_id, rollout_id)

    async def connection(self, run_id: str, rollout_id: str) -> McpConnection:
        """``rollout_id``'s connection, started (and waited for) if it has
        none; ``McpServerError`` naming the server and the rollout when it
        cannot be started (the next call tries again)."""
        if not rollout_id:
            raise McpServerError(self._config.name, "a per-rollout connection needs a rollout id")
        key = self._key(run_id, rollout_id)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(run_id, rollout_id)
            self._spawn(functools.partial(self._hold, key, slot))
        within = start_deadline_s(self._config)
        with anyio.move_on_after(within):
            await slot.ready.wait()
        if slot.connection is not None:
            return slot.connection
        why = slot.error or (
            f"did not start within {within:g} s" if not slot.ready.is_set() else "it was closed"
        )
        raise McpServerError(
            self._config.name, f"could not open a connection for rollout {key[1]!r}: {why}"
        )

    async def _hold(self, key: tuple[str, str], slot: _Slot) -> None:
        """Open the rollout's connection, offer its roots, keep it open
        until closed (``finish``) or the owner ends."""
        try:
            with slot.scope:
                workspaces = Workspaces(self._config.workspace_root)
                space = await workspaces.get(slot.run_id, slot.rollout_id)
                connection = McpConnection(
                    self._config, pins=self._pins, on_notification=self._sink, hooks=self._hooks
                )
                # Offered from the handshake on: the server's first roots/list sees them.
                await connection.set_roots(_WORKSPACE, [space.path])
                await connection.set_roots(_ADDED, self._added.get(key, ()))
                async with connection:
                    slot.connection = connection
                    slot.ready.set()
                    _log.info(
                        "mcp.rollout.connected",
                        server=self._config.name,
                        run_id=slot.run_id,
                        rollout=key[1],
                        workspace=str(space.path),
                    )
                    await anyio.sleep_forever()
        except (AgentrtError, OSError) as exc:  # the server, or the workspace, cannot be had
            slot.error = exc.detail if isinstance(exc, McpServerError) else str(exc)
            _log.warning(
                "mcp.rollout.not_started",
                server=self._config.name,
                rollout=key[1],
                error=slot.error,
            )
        finally:
            slot.connection = None
            slot.ready.set()
            slot.done.set()
            if self._slots.get(key) is slot:
                del self._slots[key]

    async def set_roots(self, run_id: str, rollout_id: str, paths: Sequence[Path]) -> None:
        """Offer ``paths`` to ``rollout_id``'s connection besides its
        workspace (replacing what was added before; empty: withdraw them);
        an open connection's server hears ``roots/list_changed``, one
        started later offers them from its start."""
        key = self._key(run_id, rollout_id)
        if paths:
            self._added[key] = tuple(Path(p) for p in paths)
        else:
            self._added.pop(key, None)
        slot = self._slots.get(key)
        if slot is not None and slot.connection is not None:
            await slot.connection.set_roots(_ADDED, self._added.get(key, ()))

    async def finish(self, run_id: str, rollout_id: str | None = None) -> int:
        """``rollout_id`` (every rollout of ``run_id`` when None) ended:
        close its connection and wait for it to be closed (its server
        process gone); returns how many were closed."""
        keys = [
            key
            for key in self._slots
            if key[0] == run_id and (rollout_id is None or key == self._key(run_id, rollout_id))
        ]
        for key in [k for k in self._added if k[0] == run_id]:
            if rollout_id is None or key == self._key(run_id, rollout_id):
                del self._added[key]
        slots = [self._slots[key] for key in keys]
        for slot in slots:
            slot.scope.cancel()
        with anyio.move_on_after(_CLOSE_S, shield=True):
            for slot in slots:
                await slot.done.wait()
        return len(slots)
