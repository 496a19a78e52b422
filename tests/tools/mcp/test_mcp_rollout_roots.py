"""Roots per rollout (``per_rollout = true``): each rollout gets a connection
of its own, whose roots are its workspace (and the configured roots), started
on its first call and closed when it ends; against the reference servers
from npm: ``server-filesystem`` (which, started without a folder, serves the
client's roots) and ``server-everything`` (whose ``get-roots-list`` shows
what the server last heard)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig
from agentrt.protocols import Event, ModelRequest, ScalingSpec, SummaryWritten, ToolMessage
from agentrt.protocols._ids import RolloutId, sub_rollout_id
from agentrt.runtime.kernel._system import ActorSystem
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContext
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError
from agentrt.tools.mcp._mcp_tool import McpTool
from agentrt.tools.mcp._servers import McpServers, spawn_mcp_servers
from agentrt.tools.sandbox._workspaces import Workspaces
from tests._support.ports import free_port

from .conftest import EVERYTHING, FILESYSTEM
from .test_mcp_reference_servers import _serve_everything, _stop

pytestmark = [pytest.mark.anyio, pytest.mark.process]

RUN = "run-roots"


def _context(slot: str, *, run_id: str = RUN) -> ToolContext:
    return ToolContext(run_id=run_id, rollout_id=str(RolloutId(run_id, slot)))


def _tools(servers: McpServers, server: str) -> dict[str, McpTool]:
    return {t.remote_name: t for t in servers.tools(server)}


async def _until(
    tool: McpTool, arguments: dict[str, Any], context: ToolContext, done: Callable[[str], bool]
) -> str:
    """Call ``tool`` until its text satisfies ``done`` (the servers read
    roots in the background); the last text after 20 s."""
    with anyio.move_on_after(20):
        while not done(text := (await tool.call(arguments, context)).text):  # noqa: ASYNC110
            await anyio.sleep(0.1)
    return text


def _server_processes(package: str) -> int:
    """Live processes of ``package`` this test started (npx and node)."""
    count = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(
                package.split("@", 2)[1] in arg for arg in child.cmdline()
            ):
                count += 1
        except psutil.Error:
            continue
    return count


async def _workspace(root: Path, slot: str, files: dict[str, str]) -> Path:
    """Create the rollout's workspace as its ``shell`` would, with ``files``."""
    space = await Workspaces(root).get(RUN, str(RolloutId(RUN, slot)))
    for name, text in files.items():
        (space.path / name).write_text(text)
    return space.path


async def test_each_rollout_sees_only_its_own_workspace_through_server_filesystem(
    npx: str, tmp_path: Path, open_dir: Path
) -> None:
    root = open_dir / "workspaces"  # reachable by the sandbox's user, like the shell's
    shared_dir = tmp_path / "shared"
    shared_dir.mkdir()
    a = await _workspace(root, "r0", {"a.txt": "rollout zero's file"})
    b = await _workspace(root, "r1", {"b.txt": "rollout one's file"})
    config = StdioServerConfig(
        name="fs",
        command=npx,
        args=["-y", FILESYSTEM],  # no folder: it serves the client's roots
        roots=[shared_dir],
        per_rollout=True,
        workspace_root=root,
    )
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [config], require_all=True)
        handle = servers.connections["fs"]
        shared_only = _server_processes(FILESYSTEM)
        tools = _tools(servers, "fs")
        listing, read = tools["list_allowed_directories"], tools["read_text_file"]
        r0, r1 = _context("r0"), _context("r1")

        seen0 = await _until(listing, {}, r0, lambda t: str(a.resolve()) in t)
        seen1 = await _until(listing, {}, r1, lambda t: str(b.resolve()) in t)
        assert (await handle.status()).rollouts == 2
        three = _server_processes(FILESYSTEM)
        # A call of no rollout goes to the shared connection: configured roots only.
        seen_shared = await _until(listing, {}, ToolContext(), lambda t: "shared" in t)

        own0 = await read.call({"path": str(a / "a.txt")}, r0)
        own1 = await read.call({"path": str(b / "b.txt")}, r1)
        other0 = await read.call({"path": str(b / "b.txt")}, r0)
        other1 = await read.call({"path": str(a / "a.txt")}, r1)
        listed0 = await tools["list_directory"].call({"path": str(a)}, r0)
        listed_other = await tools["list_directory"].call({"path": str(b)}, r0)

        # A sub-agent's call (a rollout id under r0) shares r0's connection.
        sub = ToolContext(run_id=RUN, rollout_id=sub_rollout_id(r0.rollout_id, "worker-1"))
        own_sub = await read.call({"path": str(a / "a.txt")}, sub)
        assert (await handle.status()).rollouts == 2

        await servers.rollout_finished(RUN, r0.rollout_id)
        after_end = await handle.status()
        await servers.run_finished(RUN)
        after_run = await handle.status()
        left = _server_processes(FILESYSTEM)
        await servers.stop()

    assert str(b.resolve()) not in seen0
    assert str(shared_dir.resolve()) in seen0
    assert str(a.resolve()) not in seen1
    assert str(shared_dir.resolve()) in seen1
    assert str(a.resolve()) not in seen_shared
    assert str(b.resolve()) not in seen_shared
    assert (own0.text, own1.text, own_sub.text) == (
        "rollout zero's file",
        "rollout one's file",
        "rollout zero's file",
    )
    for refused in (other0, other1, listed_other):
        assert refused.is_error, refused.text
        assert "outside allowed directories" in refused.text, refused.text
    assert "a.txt" in listed0.text
    assert "b.txt" not in listed0.text
    assert (after_end.rollouts, after_run.rollouts) == (1, 0)
    # Each connection is a server process of its own; closed ones are gone.
    assert shared_only >= 1
    assert three == 3 * shared_only
    assert left == shared_only


async def test_a_rollouts_roots_change_is_announced_to_its_server_only(
    npx: str, tmp_path: Path, open_dir: Path
) -> None:
    root = open_dir / "workspaces"
    extra = tmp_path / "extra"
    extra.mkdir()
    a = await _workspace(root, "r0", {})
    b = await _workspace(root, "r1", {})
    config = StdioServerConfig(
        name="everything",
        command=npx,
        args=["-y", EVERYTHING],
        per_rollout=True,
        workspace_root=root,
    )
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [config], require_all=True)
        roots = _tools(servers, "everything")["get-roots-list"]
        r0, r1 = _context("r0"), _context("r1")
        before0 = await _until(roots, {}, r0, lambda t: a.as_uri() in t)
        before1 = await _until(roots, {}, r1, lambda t: b.as_uri() in t)

        await servers.set_rollout_roots(RUN, r0.rollout_id, [extra])
        # The server re-reads its roots when it hears roots/list_changed.
        after0 = await _until(roots, {}, r0, lambda t: extra.as_uri() in t)
        after1 = (await roots.call({}, r1)).text
        await servers.set_rollout_roots(RUN, r0.rollout_id, [])
        gone0 = await _until(roots, {}, r0, lambda t: extra.as_uri() not in t)
        await servers.stop()

    assert b.as_uri() not in before0
    assert a.as_uri() not in before1
    assert extra.as_uri() not in before0
    assert extra.as_uri() in after0
    assert a.as_uri() in after0
    assert extra.as_uri() not in after1
    assert a.as_uri() not in after1
    assert extra.as_uri() not in gone0
    assert a.as_uri() in gone0


async def test_rollout_roots_are_refused_for_a_shared_connection(
    fixture_server: Callable[..., StdioServerConfig], tmp_path: Path
) -> None:
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [fixture_server("fx")], require_all=True)
        handle = servers.connections["fx"]
        with pytest.raises(McpServerError, match="per_rollout is false"):
            await handle.set_rollout_roots(RUN, "run-roots-r0", [tmp_path])
        await servers.set_rollout_roots(RUN, "run-roots-r0", [tmp_path])  # skips it
        assert not servers.per_rollout
        assert (await handle.status()).rollouts == 0
        await servers.stop()


def _documented_mcp() -> dict[str, Any]:
    """The ``[mcp]`` entries of docs/configuration.md's "Roots per rollout"."""
    doc = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = doc.split("### Roots per rollout", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None, "docs/configuration.md: no TOML under 'Roots per rollout'"
    servers: dict[str, Any] = tomllib.loads(block.group(1))["mcp"]
    return servers


def test_the_documented_entry_is_a_per_rollout_server() -> None:
    [(name, entry)] = _documented_mcp().items()
    config = StdioServerConfig.model_validate({"name": name, **entry})
    assert config.per_rollout
    assert config.args[-1] == FILESYSTEM  # the version the tests run


def test_workspace_root_needs_per_rollout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workspace_root is only read with per_rollout"):
        StdioServerConfig(name="fs", command="npx", workspace_root=tmp_path)


async def test_a_runs_rollouts_each_work_in_their_own_workspace_through_the_runtime(
    npx: str, open_dir: Path
) -> None:
    """Whole runs of a ``Runtime``: two rollouts of one agent call the same
    ``per_rollout`` server, each reads its own workspace's note and is
    refused the other's; the connections are gone when the run ends."""
    root = open_dir / "workspaces"
    run_id = "run-e2e"
    for slot in ("r0", "r1"):
        space = await Workspaces(root).get(run_id, str(RolloutId(run_id, slot)))
        (space.path / "note.txt").write_text(f"the note of {slot}")

    def script(request: ModelRequest) -> Any:
        results = [str(m.content) for m in request.messages if isinstance(m, ToolMessage)]
        listed = next((r for r in results if str(root.resolve()) in r), None)
        if listed is None:  # the server reads the roots in the background: ask again
            return (
                ScriptedToolCall("workspace__list_allowed_directories", {})
                if len(results) < 100
                else "?"
            )
        own = next(line.strip() for line in listed.splitlines() if str(root.resolve()) in line)
        other = Path(own).with_name("r1" if own.endswith("r0") else "r0")
        after = results[results.index(listed) + 1 :]
        if not after:
            return ScriptedToolCall("workspace__read_text_file", {"path": f"{own}/note.txt"})
        if len(after) == 1:
            return ScriptedToolCall("workspace__read_text_file", {"path": f"{other}/note.txt"})
        return " | ".join([listed, *after])

    backend = ScriptedBackend(script, name="scripted", models=["scripted"])
    # The server as docs/configuration.md configures it, with a workspace root of the test's.
    servers = _documented_mcp()
    servers["workspace"]["workspace_root"] = str(root)
    config = {"mcp": servers}
    agent = AgentConfig(
        name="reader",
        tools=["workspace__list_allowed_directories", "workspace__read_text_file"],
    )
    open_at_summaries: list[int] = []
    async with Runtime(config, backends=[backend], agents={"reader": agent}) as rt:

        async def events(event: Event) -> None:
            if isinstance(event, SummaryWritten):  # its rollout has ended, the run has not
                open_at_summaries.append((await rt.mcp_status())["workspace"].rollouts)

        result = await rt.run(
            "read your note",
            agent="reader",
            scaling=ScalingSpec(rollouts=2),
            run_id=run_id,
            events=events,
        )
        status = (await rt.mcp_status())["workspace"]

    answers = {s.rollout_id: s.answer or "" for s in result.summaries}
    assert set(answers) == {str(RolloutId(run_id, "r0")), str(RolloutId(run_id, "r1"))}
    for rollout_id, answer in answers.items():
        slot = RolloutId.parse(run_id, rollout_id).slot
        other = "r1" if slot == "r0" else "r0"
        assert f"the note of {slot}" in answer, answer
        assert f"the note of {other}" not in answer, answer
        assert "outside allowed directories" in answer, answer
    assert status.rollouts == 0
    # Each rollout's connection closed when it ended, before the run did.
    assert len(open_at_summaries) == 2
    assert open_at_summaries[0] <= 1
    assert open_at_summaries[1] == 0


async def test_a_rollout_whose_connection_cannot_open_gets_an_error_naming_it(
    fixture_server: Callable[..., StdioServerConfig], tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    config = fixture_server("fx", per_rollout=True, workspace_root=str(not_a_folder))
    async with ActorSystem() as system:
        servers = await spawn_mcp_servers(system, [config], require_all=True)
        lookup = _tools(servers, "fx")["lookup"]
        first = await lookup.call({"key": "k"}, _context("r0"))
        again = await lookup.call({"key": "k"}, _context("r0"))  # tried again, not cached
        shared = await lookup.call({"key": "k"}, ToolContext())
        status = await servers.connections["fx"].status()
        await servers.stop()
    for failed in (first, again):
        assert failed.is_error
        assert "MCP tool 'fx__lookup'" in failed.text, failed.text
        assert "could not open a connection for rollout 'r0'" in failed.text, failed.text
    assert not shared.is_error, shared.text
    assert (status.rollouts, status.actor_restarts) == (0, 0)


async def test_over_http_each_rollout_has_a_session_of_its_own(npx: str, open_dir: Path) -> None:
    root = open_dir / "workspaces"
    a = await _workspace(root, "r0", {})
    b = await _workspace(root, "r1", {})
    port = free_port()
    process = _serve_everything(npx, port)
    try:
        config = HttpServerConfig(
            name="ev",
            url=f"http://127.0.0.1:{port}/mcp",
            per_rollout=True,
            workspace_root=root,
        )
        async with ActorSystem() as system:
            servers = await spawn_mcp_servers(system, [config], require_all=True)
            roots = _tools(servers, "ev")["get-roots-list"]
            seen0 = await _until(roots, {}, _context("r0"), lambda t: a.as_uri() in t)
            seen1 = await _until(roots, {}, _context("r1"), lambda t: b.as_uri() in t)
            open_sessions = (await servers.connections["ev"].status()).rollouts
            await servers.run_finished(RUN)
            closed = (await servers.connections["ev"].status()).rollouts
            await servers.stop()
    finally:
        _stop(process)
    assert a.as_uri() in seen0
    assert b.as_uri() not in seen0
    assert b.as_uri() in seen1
    assert a.as_uri() not in seen1
    assert (open_sessions, closed) == (2, 0)
