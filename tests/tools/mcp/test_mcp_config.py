"""MCP client configuration, tool-name namespacing and content conversion:
pure functions, no servers."""

from __future__ import annotations

import base64
import re

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

import agentrt.tools
from agentrt.runtime.kernel._backoff import Backoff, RestartBackoff
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.tools.mcp._content import tool_output
from agentrt.tools.mcp._mcp_config import (
    HttpServerConfig,
    McpServerConfig,
    RestartPolicy,
    StdioServerConfig,
    parse_server_spec,
)
from agentrt.tools.mcp._mcp_tool import namespaced_names

pytestmark = pytest.mark.process

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DIGEST = "ab" * 32


def test_the_mcp_client_names_are_on_the_tools_surface() -> None:
    for name in ("McpConnection", "HttpServerConfig", "StdioServerConfig", "McpServerError"):
        assert name in agentrt.tools.__all__
        assert getattr(agentrt.tools, name).__name__ == name


def test_command_specs_become_stdio_servers_named_after_the_package() -> None:
    spec = parse_server_spec("npx -y @modelcontextprotocol/server-everything@2026.8.31")
    assert isinstance(spec, StdioServerConfig)
    assert (spec.name, spec.command) == ("everything", "npx")
    assert spec.args == ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]
    quoted = parse_server_spec("python3 'my server.py' --root '/a b'")
    assert isinstance(quoted, StdioServerConfig)
    assert quoted.args == ["my server.py", "--root", "/a b"]
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", quoted.name)
    assert parse_server_spec("uvx mcp-server-fetch", name="web").name == "web"
    named = parse_server_spec("fs=npx -y @modelcontextprotocol/server-filesystem /data")
    assert isinstance(named, StdioServerConfig)
    assert (named.name, named.command) == ("fs", "npx")
    assert named.args == ["-y", "@modelcontextprotocol/server-filesystem", "/data"]
    # An '=' later in the command is the command's own.
    assert parse_server_spec("env A=1 server").name != "env A"
    remote = parse_server_spec("docs=https://example.com/mcp")
    assert (remote.name, getattr(remote, "url", None)) == ("docs", "https://example.com/mcp")


def test_url_specs_become_http_servers() -> None:
    spec = parse_server_spec("http://127.0.0.1:8000/mcp")
    assert isinstance(spec, HttpServerConfig)
    assert spec.url == "http://127.0.0.1:8000/mcp"
    assert spec.name.startswith("127-0-0-1-")
    assert parse_server_spec("https://example.com/mcp").name != spec.name


@pytest.mark.parametrize("bad", ["", "   ", "npx 'unterminated"])
def test_bad_specs_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="--mcp"):
        parse_server_spec(bad)


@pytest.mark.parametrize("name", ["a__b", "has space", "-lead", "x" * 33, ""])
def test_server_names_must_fit_tool_names(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        StdioServerConfig(name=name, command="x")


def test_approved_hashes_are_validated_and_normalised() -> None:
    config = StdioServerConfig(name="s", command="x", approved={"t": "sha256:" + DIGEST.upper()})
    assert config.approved == {"t": DIGEST}
    with pytest.raises(ValidationError, match=r"approved\['t'\] must be a sha256 hex digest"):
        StdioServerConfig(name="s", command="x", approved={"t": "abc"})


def test_http_headers_and_bearer_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    config = HttpServerConfig(
        name="h", url="https://x/mcp", headers={"X-A": "1"}, bearer_token="s3cr3t-v"
    )
    assert config.http_headers() == {"X-A": "1", "Authorization": "Bearer s3cr3t-v"}
    assert "s3cr3t" not in repr(config)
    from_env = HttpServerConfig(
        name="h", url="https://x/mcp", bearer_token_env="AGENTRT_TEST_TOKEN"
    )
    monkeypatch.delenv("AGENTRT_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="AGENTRT_TEST_TOKEN"):
        from_env.http_headers()
    monkeypatch.setenv("AGENTRT_TEST_TOKEN", "envtok")
    assert from_env.http_headers() == {"Authorization": "Bearer envtok"}
    with pytest.raises(ValidationError, match="Authorization"):
        HttpServerConfig(
            name="h", url="https://x/mcp", headers={"authorization": "a"}, bearer_token="b"
        )
    with pytest.raises(ValidationError, match="url"):
        HttpServerConfig(name="h", url="ftp://x/mcp")


def test_server_configs_parse_both_transports() -> None:
    servers = TypeAdapter(list[McpServerConfig])
    parsed = servers.validate_python(
        [
            {"name": "a", "command": "npx", "args": ["-y", "pkg"]},
            {"name": "b", "transport": "http", "url": "http://h/mcp"},
            {"name": "c", "url": "http://h/mcp"},
        ]
    )
    assert [type(s) for s in parsed] == [StdioServerConfig, HttpServerConfig, HttpServerConfig]
    with pytest.raises(ValidationError, match="command"):
        servers.validate_python([{"name": "a", "comand": "typo"}])
    with pytest.raises(ValidationError, match="sse"):
        servers.validate_python([{"name": "a", "transport": "sse", "url": "u"}])


def test_the_restart_policy_is_the_actor_floors_backoff() -> None:
    policy = RestartPolicy(
        initial_delay_s=0.5,
        multiplier=2,
        max_delay_s=3,
        jitter=0.1,
        max_failures=4,
        stable_after_s=12,
    )
    assert policy.backoff() == Backoff(
        initial_s=0.5, multiplier=2.0, max_s=3.0, jitter=0.1, reset_after_s=12.0, max_restarts=3
    )
    # ``max_failures`` failures in a row mark the server failed.
    backoff = RestartBackoff(policy.backoff(), rand=lambda: 0.0)
    assert [backoff.crashed(0.0) for _ in range(4)] == [0.5, 1.0, 2.0, None]


def test_namespacing_is_valid_unique_and_stable() -> None:
    names = namespaced_names("srv", ["echo", "a.b", "a_b", "x" * 80, "get-sum"])
    assert names["echo"] == "srv__echo"
    assert names["get-sum"] == "srv__get-sum"
    assert len(set(names.values())) == 5
    assert names["a.b"] == "srv__a_b"  # sorted first, keeps the plain form
    assert names["a_b"].startswith("srv__a_b_")
    assert len(names["a_b"]) == len("srv__a_b_") + 8
    assert len(names["x" * 80]) == 64
    assert namespaced_names("srv", reversed(list(names))) == names


@given(st.lists(st.text(min_size=1, max_size=100), max_size=20))
def test_namespaced_names_always_fit_openai_function_names(tools: list[str]) -> None:
    names = namespaced_names("server-1", tools)
    assert set(names) == set(tools)
    assert len(set(names.values())) == len(names)
    assert all(OPENAI_NAME.match(n) and n.startswith("server-1__") for n in names.values())


def test_content_blocks_become_tool_content() -> None:
    png = b"\x89PNG\r\n\x1a\nrest"
    result = types.CallToolResult(
        content=[
            types.TextContent(text="hello"),
            types.ImageContent(data=base64.b64encode(png).decode(), mime_type="image/png"),
            types.AudioContent(data=base64.b64encode(b"RIFF").decode(), mime_type="audio/wav"),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="demo://blob", blob=base64.b64encode(b"\x00\x01").decode(), mime_type="x/y"
                )
            ),
            types.ResourceLink(uri="demo://doc", name="doc", description="a document"),
            types.ImageContent(data="%%%not base64%%%", mime_type="image/png"),
        ],
        structured_content={"k": 1},
    )
    out = tool_output(result)
    kinds = [c.kind for c in out.content]
    assert kinds == ["text", "image", "audio", "resource", "resource", "text"]
    assert out.content[1].data == png
    assert out.content[2].data == b"RIFF"
    assert (out.content[3].uri, out.content[3].data) == ("demo://blob", b"\x00\x01")
    assert "demo://doc" in out.content[4].text
    assert "a document" in out.content[4].text
    assert "invalid base64" in out.content[5].text
    assert out.structured == {"k": 1}
    assert not out.is_error

    only_structured = tool_output(
        types.CallToolResult(content=[], structured_content={"a": 2}, is_error=True)
    )
    assert only_structured.text == '{"a": 2}'
    assert only_structured.is_error
