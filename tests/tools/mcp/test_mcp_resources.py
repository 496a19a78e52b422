"""MCP resources for agents, through ``Runtime.run`` with a scripted model:
the resource tools list (page by page), read (text clipped, binary named,
a template filled in) and list templates; an agent (a YAML spec, an agent
of ``agentrt.toml`` or an ``AgentConfig`` built in Python) attaches a
resource (by URI or template) that each step shows, kept current by its
subscription.  Against ``resource_server.py`` (counts reads),
``server-everything`` and ``server-filesystem`` (whose files reach the agent
through its tools: it offers no MCP resources)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt import Runtime
from agentrt.agents import AgentConfig, ResourceAttachment
from agentrt.protocols import ModelRequest, ToolMessage, UserMessage
from agentrt.runtime.config._config_file import load_config
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend, ScriptedToolCall
from agentrt.tools._tool import ToolContent, ToolContext
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig, StdioServerConfig
from agentrt.tools.mcp._resources import expand_template, read_text
from tests._support.ports import free_port
from tests.tools.mcp.test_mcp_reference_servers import _serve_everything, _stop

pytestmark = pytest.mark.process  # the unit tests here are cheap; most start servers

RESOURCE_SERVER = Path(__file__).with_name("resource_server.py")


def _server(**options: Any) -> dict[str, Any]:
    base = {"command": sys.executable, "args": ["-W", "ignore", str(RESOURCE_SERVER)]}
    return base | options


def _tool_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, ToolMessage)]


def _steps(*calls: ScriptedToolCall) -> Callable[[ModelRequest], Any]:
    """One call per step, then "done"."""

    def script(request: ModelRequest) -> Any:
        done = len(_tool_texts(request))
        return calls[done] if done < len(calls) else "done"

    return script


def test_templates_expand_with_percent_encoding() -> None:
    assert expand_template("fixture://notes/{name}", {"name": "a b/c"}) == (
        "fixture://notes/a%20b%2Fc"
    )
    assert expand_template("file:///{+path}", {"path": "src/a b.py"}) == "file:///src/a%20b.py"
    with pytest.raises(KeyError, match="name"):
        expand_template("fixture://notes/{name}", {})


def test_a_read_clips_text_and_names_binary_contents() -> None:
    contents = [
        ToolContent(kind="resource", text="abcdefghij", uri="x://t", mime_type="text/plain"),
        ToolContent(kind="resource", data=b"\x89PNG....", uri="x://i", mime_type="image/png"),
        ToolContent(kind="resource", data=b'{"a": 1}', uri="x://j", mime_type="application/json"),
    ]
    shown = read_text(contents, max_chars=4)
    assert shown.splitlines() == [
        "abcd",
        "[... 6 more characters of x://t not shown]",
        "[binary resource x://i (image/png, 8 bytes)]",
        "",
        "[... 8 more characters of x://j not shown]",
    ]
    assert read_text(contents[2:], max_chars=100) == '{"a": 1}'


@pytest.mark.anyio
async def test_the_model_lists_and_reads_resources_and_a_template() -> None:
    backend = ScriptedBackend(
        _steps(
            ScriptedToolCall("fx__resources_list", {}),
            ScriptedToolCall("fx__resources_list", {"cursor": "1"}),
            ScriptedToolCall("fx__resources_read", {"uri": "fixture://logo"}),
            ScriptedToolCall("fx__resources_read", {"uri": "fixture://long"}),
            ScriptedToolCall("fx__resources_templates_list", {}),
            ScriptedToolCall("fx__resources_read", {"uri": "fixture://notes/abc"}),
        )
    )
    server = _server(resources={"tools": True, "max_chars": 100})
    agent = AgentConfig(name="a")
    async with Runtime({"mcp": {"fx": server}}, backends=[backend], agents={"a": agent}) as rt:
        result = await rt.run("go", agent="a")
    assert result.answer == "done"
    offered = {t.name for t in backend.requests[0].tools or ()}
    assert {"fx__resources_list", "fx__resources_read", "fx__resources_templates_list"} <= offered
    first, second, logo, long, templates, note = _tool_texts(backend.requests[-1])
    assert json.loads(first) == {
        "resources": [{"uri": "fixture://counter", "name": "counter", "mime_type": "text/plain"}],
        "next_cursor": "1",
    }
    assert [r["uri"] for r in json.loads(second)["resources"]] == ["fixture://logo"]
    assert logo == "[binary resource fixture://logo (image/png, 32 bytes)]"
    assert long == "x" * 100 + "\n[... 4900 more characters of fixture://long not shown]"
    assert json.loads(templates)["resource_templates"][0]["uri_template"] == (
        "fixture://notes/{name}"
    )
    assert note == "the note called abc"


@pytest.mark.anyio
async def test_resource_tools_are_offered_only_when_asked_for() -> None:
    backend = ScriptedBackend(["done"])
    async with Runtime(
        {"mcp": {"fx": _server()}}, backends=[backend], agents={"a": AgentConfig(name="a")}
    ) as rt:
        await rt.run("go", agent="a")
    assert {t.name for t in backend.requests[0].tools or ()} == {"fx__bump"}


def _attached(request: ModelRequest) -> list[str]:
    return [
        str(m.content)
        for m in request.messages
        if isinstance(m, UserMessage) and str(m.content).startswith("Attached resource")
    ]


def _assert_kept_current(backend: ScriptedBackend) -> None:
    """The counter and the note were shown at both steps; the bump's
    notification made the client read the counter once more (read 3: the
    note was read 2); the note was not read again."""
    before, after = (_attached(r) for r in backend.requests)
    assert before == [
        "Attached resource fixture://counter (MCP server 'fx'):\ncount=0 reads=1",
        "Attached resource fixture://notes/today (MCP server 'fx'):\nthe note called today",
    ]
    assert after == [
        "Attached resource fixture://counter (MCP server 'fx'):\ncount=1 reads=3",
        before[1],
    ]


@pytest.mark.anyio
async def test_an_attached_resource_is_kept_current_by_its_subscription(tmp_path: Path) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        "name: watcher\n"
        "tools: [{mcp: fx}]\n"
        "resources:\n"
        "  - {mcp: fx, uri: 'fixture://counter'}\n"
        "  - {mcp: fx, template: 'fixture://notes/{name}', arguments: {name: today}}\n"
    )
    backend = ScriptedBackend(_steps(ScriptedToolCall("fx__bump", {})))
    config = {"mcp": {"fx": _server()}, "agents": {"watcher": str(spec)}}
    async with Runtime(config, backends=[backend]) as rt:
        result = await rt.run("go", agent="watcher")
    assert result.answer == "done"
    _assert_kept_current(backend)


@pytest.mark.anyio
async def test_an_agent_of_agentrt_toml_attaches_resources(tmp_path: Path) -> None:
    path = tmp_path / "agentrt.toml"
    path.write_text(
        "[mcp.fx]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = ['-W', 'ignore', {json.dumps(str(RESOURCE_SERVER))}]\n"
        "\n"
        "[agents.watcher]\n"
        "tools = ['fx__bump']\n"
        "resources = [\n"
        "  { mcp = 'fx', uri = 'fixture://counter' },\n"
        "  { mcp = 'fx', template = 'fixture://notes/{name}', arguments = { name = 'today' } },\n"
        "]\n"
    )
    backend = ScriptedBackend(_steps(ScriptedToolCall("fx__bump", {})))
    async with Runtime(load_config(path).runtime, backends=[backend]) as rt:
        result = await rt.run("go", agent="watcher")
    assert result.answer == "done"
    _assert_kept_current(backend)


@pytest.mark.anyio
async def test_an_agent_config_attaches_resources() -> None:
    agent = AgentConfig(
        name="watcher",
        tools=["fx__bump"],
        resources=[
            ResourceAttachment(mcp="fx", uri="fixture://counter"),
            ResourceAttachment(
                mcp="fx", template="fixture://notes/{name}", arguments={"name": "today"}
            ),
        ],
    )
    backend = ScriptedBackend(_steps(ScriptedToolCall("fx__bump", {})))
    async with Runtime({"mcp": {"fx": _server()}}, backends=[backend]) as rt:
        # Passed to the run itself (not configured by name): built the same way.
        result = await rt.run("go", agent=agent)
    assert result.answer == "done"
    _assert_kept_current(backend)


@pytest.mark.anyio
async def test_an_agent_config_attaching_from_a_server_not_open_fails_the_open() -> None:
    agent = AgentConfig(name="a", resources=[ResourceAttachment(mcp="fs", uri="file:///x")])
    with pytest.raises(ConfigError) as caught:
        async with Runtime({}, backends=[ScriptedBackend(["done"])], agents={"a": agent}):
            pass
    assert "resources[0] reads from the MCP server 'fs', which is not open (open: none)" in str(
        caught.value
    )


@pytest.mark.anyio
async def test_resources_of_server_everything(
    everything: StdioServerConfig, tmp_path: Path
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        "name: reader\n"
        "tools: [{mcp: everything}]\n"
        "resources:\n"
        "  - mcp: everything\n"
        "    template: 'demo://resource/dynamic/blob/{resourceId}'\n"
        "    arguments: {resourceId: '3'}\n"
    )
    backend = ScriptedBackend(
        _steps(
            ScriptedToolCall("everything__resources_list", {}),
            ScriptedToolCall("everything__resources_templates_list", {}),
            ScriptedToolCall(
                "everything__resources_read", {"uri": "demo://resource/dynamic/text/7"}
            ),
        )
    )
    server = everything.model_dump() | {"resources": {"tools": True}}
    config = {"mcp": {"everything": server}, "agents": {"reader": str(spec)}}
    async with Runtime(config, backends=[backend]) as rt:
        result = await rt.run("go", agent="reader")
    assert result.answer == "done"
    listed, templates, read = _tool_texts(backend.requests[-1])
    assert any(
        r["uri"].startswith("demo://resource/static/document/")
        for r in json.loads(listed)["resources"]
    )
    assert "demo://resource/dynamic/text/{resourceId}" in {
        t["uri_template"] for t in json.loads(templates)["resource_templates"]
    }
    assert read.startswith("Resource 7: This is a plaintext resource created at ")
    # The attached blob template (text/plain) is decoded into the prompt.
    [attached] = _attached(backend.requests[0])
    assert attached.startswith(
        "Attached resource demo://resource/dynamic/blob/3 (MCP server 'everything'):\n"
        "Resource 3: This is a base64 blob created at "
    )


@pytest.mark.anyio
async def test_resources_of_server_everything_over_http(npx: str) -> None:
    port = free_port()
    server = _serve_everything(npx, port)
    uri = "demo://resource/dynamic/text/5"
    try:
        config = HttpServerConfig(
            name="ev", url=f"http://127.0.0.1:{port}/mcp", resources={"tools": True}
        )
        async with McpConnection(config) as conn:
            tools = {t.remote_name: t for t in conn.tools()}
            read = await tools["resources/read"].call({"uri": uri}, ToolContext())
            assert read.text.startswith("Resource 5: This is a plaintext resource created at ")
            first = await conn.attached(uri)
            # The server sends updates of subscribed resources every 5 s once asked;
            # each read stamps the time, so a read after an update differs.
            await tools["toggle-subscriber-updates"].call({}, ToolContext())
            with anyio.fail_after(30):
                while (now := await conn.attached(uri)) == first:  # noqa: ASYNC110 - the server's clock
                    await anyio.sleep(0.1)
            assert now.startswith("Resource 5: This is a plaintext resource created at ")
    finally:
        _stop(server)


@pytest.mark.anyio
async def test_files_of_server_filesystem_reach_the_agent(
    filesystem: StdioServerConfig, tmp_path: Path
) -> None:
    """server-filesystem 2026.8.31 declares no ``resources`` capability: its
    files reach the agent through its tools, a non-media file as an embedded
    binary resource (named, not inlined); no resource tools are offered even
    when asked for, and an attachment says why it cannot be shown.  It has
    no subscriptions, so a change is seen by reading again."""
    root = tmp_path / "root"
    notes = root / "notes.txt"
    notes.write_text("version 1\n")
    (root / "data.bin").write_bytes(b"\x00\x01\x02 binary")
    calls = [
        ScriptedToolCall("fs__list_directory", {"path": str(root)}),
        ScriptedToolCall("fs__read_media_file", {"path": str(root / "data.bin")}),
        ScriptedToolCall("fs__read_text_file", {"path": str(notes)}),
        ScriptedToolCall("fs__read_text_file", {"path": str(notes)}),
    ]

    def script(request: ModelRequest) -> Any:
        done = len(_tool_texts(request))
        if done == 3:
            notes.write_text("version 2\n")  # changed on disk between two reads
        return calls[done] if done < len(calls) else "done"

    backend = ScriptedBackend(script)
    agent = AgentConfig(
        name="reader",
        tools=["fs__list_directory", "fs__read_media_file", "fs__read_text_file"],
        resources=[ResourceAttachment(mcp="fs", uri=notes.as_uri())],
    )
    server = filesystem.model_dump() | {"resources": {"tools": True}}
    async with Runtime({"mcp": {"fs": server}}, backends=[backend]) as rt:
        offered = {t.spec.name for t in rt.tools}
        assert "fs__read_media_file" in offered
        assert not {name for name in offered if "resources_" in name}
        result = await rt.run("go", agent=agent)
    assert result.answer == "done"
    listed, media, first, second = _tool_texts(backend.requests[-1])
    assert sorted(listed.splitlines()) == ["[FILE] data.bin", "[FILE] notes.txt"]
    assert media == (
        f"[binary resource {(root / 'data.bin').as_uri()} (application/octet-stream, 10 bytes)]"
    )
    assert (first, second) == ("version 1\n", "version 2\n")
    assert _attached(backend.requests[0]) == [
        f"Attached resource {notes.as_uri()} (MCP server 'fs'):\n[it could not be read: "
        "MCP server 'fs': it offers no resources (no `resources` capability)]"
    ]
