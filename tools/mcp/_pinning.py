"""Tool-definition pinning: the defence against an MCP "rug pull".

A server could offer a harmless tool, get it approved, and later change its
description (new instructions for the model) or its schema.  So each tool
definition is hashed (sha256 of a canonical JSON of every field the model
or the policy reads: name, title, description, input and output schema,
annotations) and pinned when first approved: by the user in configuration
(``approved: {tool: hash}``) or, with ``new_tools: trust``, on first sight.
A definition that no longer matches its pin is blocked, with both hashes in
the message, until the new hash is approved in configuration.

Owns the hash, the ``PinStore`` protocol with an in-memory and a SQLite
implementation, and the decision for one server's listing.  Knows nothing
of sessions or transports.  Must not import agents or aggregators.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, final, runtime_checkable

import anyio
import anyio.to_thread
import msgspec

__all__ = [
    "MemoryPinStore",
    "PinDecision",
    "PinStore",
    "SqlitePinStore",
    "decide_pins",
    "tool_definition_hash",
]


def tool_definition_hash(
    name: str,
    description: str | None,
    input_schema: Mapping[str, Any],
    *,
    title: str | None = None,
    output_schema: Mapping[str, Any] | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> str:
    """sha256 hex of the canonical JSON (sorted keys, no whitespace, UTF-8)
    of a tool's model-visible definition: name, description and input
    schema, and its title, output schema and annotations when it has them
    (so a definition without them hashes as it always did)."""
    definition: dict[str, Any] = {
        "name": name,
        "description": description or "",
        "inputSchema": input_schema,
    }
    if title is not None:
        definition["title"] = title
    if output_schema is not None:
        definition["outputSchema"] = output_schema
    if annotations:
        definition["annotations"] = annotations
    canonical = json.dumps(
        definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@runtime_checkable
class PinStore(Protocol):
    """Remembers the approved definition hash of each (server, tool)."""

    async def get(self, server: str, tool: str) -> str | None:
        """The pinned hash, or None if the tool was never approved."""
        ...

    async def put(self, server: str, tool: str, digest: str) -> None:
        """Pin ``digest`` as the approved definition."""
        ...


@final
class MemoryPinStore:
    """Pins kept for the life of the process."""

    def __init__(self) -> None:
        self._pins: dict[tuple[str, str], str] = {}

    async def get(self, server: str, tool: str) -> str | None:
        return self._pins.get((server, tool))

    async def put(self, server: str, tool: str, digest: str) -> None:
        self._pins[(server, tool)] = digest


_SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_tool_pins (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest TEXT NOT NULL,
    pinned_at REAL NOT NULL,
    PRIMARY KEY (server, tool)
)
"""


@final
class SqlitePinStore:
    """Pins in a SQLite file (WAL), shared by runs and processes.

    Each operation opens its own short connection in a worker thread: pins
    are read once per tool listing, so simplicity beats a pooled handle."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._initialised = False
        self._lock = anyio.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0)
        if not self._initialised:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
            conn.commit()
            self._initialised = True
        return conn

    def _get_sync(self, server: str, tool: str) -> str | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT digest FROM mcp_tool_pins WHERE server = ? AND tool = ?", (server, tool)
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[0])

    def _put_sync(self, server: str, tool: str, digest: str) -> None:
        conn = self._connect()
        try:
            conn.execute(
                "INSERT INTO mcp_tool_pins (server, tool, digest, pinned_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (server, tool) DO UPDATE SET digest = excluded.digest, "
                "pinned_at = excluded.pinned_at",
                (server, tool, digest, time.time()),
            )
            conn.commit()
        finally:
            conn.close()

    async def get(self, server: str, tool: str) -> str | None:
        async with self._lock:
            return await anyio.to_thread.run_sync(self._get_sync, server, tool)

    async def put(self, server: str, tool: str, digest: str) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._put_sync, server, tool, digest)


class PinDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Whether one tool may be offered, and why."""

    tool: str
    digest: str
    """The hash of the definition the server offers now."""
    status: Literal["approved", "pinned", "first-use", "changed", "unapproved"]
    """``approved``: matches the hash in configuration; ``pinned``: matches
    the stored pin; ``first-use``: new, pinned now (trust on first use);
    ``changed``: differs from its pin or approval (blocked);
    ``unapproved``: new and ``new_tools: block`` (blocked)."""
    expected: str | None = None
    """The approved or pinned hash a blocked tool failed to match."""
    message: str = ""
    """For a blocked tool: what happened and how to approve it."""

    @property
    def allowed(self) -> bool:
        return self.status in ("approved", "pinned", "first-use")


def _how_to(server: str, tool: str, digest: str) -> str:
    return (
        f"approve it in the configuration of MCP server {server!r}: approved: {{{tool}: {digest}}}"
    )


def _changed(server: str, tool: str, digest: str, expected: str, why: str) -> PinDecision:
    """The ``changed`` decision on ``tool``, whose definition (now
    ``digest``) is not the approved one (``expected``): ``why``."""
    return PinDecision(
        tool=tool,
        digest=digest,
        status="changed",
        expected=expected,
        message=(
            f"MCP tool {tool!r} on server {server!r} is blocked: its definition {why}. "
            f"If the change is intended, {_how_to(server, tool, digest)}"
        ),
    )


async def decide_pins(
    server: str,
    definitions: Iterable[tuple[str, str]],
    *,
    approved: Mapping[str, str],
    new_tools: Literal["trust", "block"],
    store: PinStore,
) -> dict[str, PinDecision]:
    """Decide each ``(tool, digest)`` of one server's listing.

    A hash approved in configuration wins and re-pins the store (that is how
    a changed tool is approved); otherwise the stored pin decides; a tool
    with neither is pinned now or blocked, as ``new_tools`` says."""
    decisions: dict[str, PinDecision] = {}
    for tool, digest in definitions:
        if tool in approved:
            if approved[tool] == digest:
                if await store.get(server, tool) != digest:
                    await store.put(server, tool, digest)
                decisions[tool] = PinDecision(tool=tool, digest=digest, status="approved")
            else:
                decisions[tool] = _changed(
                    server,
                    tool,
                    digest,
                    approved[tool],
                    f"(sha256 {digest}) differs from the one approved in configuration "
                    f"(sha256 {approved[tool]})",
                )
            continue
        pinned = await store.get(server, tool)
        if pinned == digest:
            decisions[tool] = PinDecision(tool=tool, digest=digest, status="pinned")
        elif pinned is not None:
            decisions[tool] = _changed(
                server,
                tool,
                digest,
                pinned,
                "(title, description, schema or annotations) changed since it was approved "
                f"(approved sha256 {pinned}, now sha256 {digest})",
            )
        elif new_tools == "trust":
            await store.put(server, tool, digest)
            decisions[tool] = PinDecision(tool=tool, digest=digest, status="first-use")
        else:
            decisions[tool] = PinDecision(
                tool=tool,
                digest=digest,
                status="unapproved",
                message=(
                    f"MCP tool {tool!r} on server {server!r} is not approved yet (new tools are "
                    f"blocked for this server; sha256 {digest}). "
                    f"To allow it, {_how_to(server, tool, digest)}"
                ),
            )
    return decisions
