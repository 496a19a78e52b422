"""OAuth for MCP servers over HTTP, end to end: an OAuth-protected MCP
server started here (``oauth_server``: the SDK's server-side auth) reached
through ``McpConnection`` with each flow — authorization code with PKCE
after dynamic registration, with a client ID metadata document and with a
pre-registered client (the person's browser driven by the test), client
credentials with ``client_secret_basic``, ``client_secret_post`` and
``private_key_jwt`` — with the RFC 8707 ``resource`` parameter, token
refresh on short-lived tokens, step-up on 403 ``insufficient_scope``,
tokens stored with owner-only permissions, and clear errors for a 401 with
no OAuth configured and for a misbehaving authorization server."""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyUrl

from agentrt import Runtime
from agentrt.protocols import McpAuthorizationRequired
from agentrt.testing import ScriptedBackend
from agentrt.tools._tool import ToolContext
from agentrt.tools.mcp._auth import McpAuthorizationError
from agentrt.tools.mcp._connection import McpConnection
from agentrt.tools.mcp._mcp_config import HttpServerConfig
from tests._support.ports import free_port

from .oauth_server import SCOPES, oauth_servers

pytestmark = pytest.mark.anyio

Person = Callable[[McpAuthorizationRequired], Awaitable[None]]


class Browser:
    """The person behind agentrt: opens each authorization URL (the
    authorization server approves at once and redirects), then follows the
    redirect to agentrt's loopback listener, as a browser would."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.prompts: list[McpAuthorizationRequired] = []
        self.finished: list[int] = []

    async def __call__(self, prompt: McpAuthorizationRequired) -> None:
        self.prompts.append(prompt)
        self._tg.start_soon(self._visit, prompt.authorization_url)

    async def _visit(self, url: str) -> None:
        async with httpx2.AsyncClient(timeout=10) as client:
            approved = await client.get(url)
            assert approved.status_code == 302, approved.text
            back = await client.get(approved.headers["location"])
            self.finished.append(back.status_code)


def http(url: str, tmp_path: Path, **auth: Any) -> HttpServerConfig:
    return HttpServerConfig.model_validate(
        {
            "name": "secure",
            "url": url,
            "connect_timeout_s": 20,
            "auth": {"token_dir": str(tmp_path / "tokens"), "open_browser": False, **auth},
        }
    )


async def call(conn: McpConnection, tool: str) -> tuple[str, bool]:
    tools = {t.spec.name: t for t in conn.tools()}
    out = await tools[f"secure__{tool}"].call({}, ToolContext())
    return out.text, out.is_error


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with anyio.create_task_group() as tg:
        yield Browser(tg)
        tg.cancel_scope.cancel()


async def test_authorization_code_with_dcr_pkce_resource_and_stored_tokens(
    tmp_path: Path, browser: Browser
) -> None:
    async with oauth_servers() as servers:
        config = http(servers.mcp_url, tmp_path)
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert len(browser.prompts) == 1
        prompt = browser.prompts[0]
        assert prompt.server == "secure"
        assert prompt.server_url == servers.mcp_url
        assert "code_challenge_method=S256" in prompt.authorization_url
        assert browser.finished == [200]
        assert servers.state.registrations == 1  # dynamic client registration
        [grant] = servers.state.grants
        assert grant.grant_type == "authorization_code"
        assert grant.scopes == ["mcp"]  # from the protected resource's scopes_supported
        assert grant.resource == servers.mcp_url  # RFC 8707

        # Owner-only storage, one file per server.
        directory = tmp_path / "tokens"
        [stored] = list(directory.iterdir())
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        assert stored.name.startswith("secure-")

        # A second connection (a restart of agentrt) uses the stored tokens: no person.
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert len(browser.prompts) == 1
        assert len(servers.state.grants) == 1


async def test_short_lived_tokens_are_refreshed_without_the_person(
    tmp_path: Path, browser: Browser
) -> None:
    async with oauth_servers(access_ttl_s=2) as servers:
        config = http(servers.mcp_url, tmp_path)
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
            await anyio.sleep(2.2)  # the access token lapses
            assert await call(conn, "whoami") == ("an authorized client", False)
        kinds = [g.grant_type for g in servers.state.grants]
        assert kinds == ["authorization_code", "refresh_token"]
        assert servers.state.grants[1].resource == servers.mcp_url
        # Loaded from the store after it lapsed: refreshed, still no person.
        await anyio.sleep(2.2)
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert [g.grant_type for g in servers.state.grants][-1] == "refresh_token"
        assert len(browser.prompts) == 1


async def test_step_up_on_insufficient_scope(tmp_path: Path, browser: Browser) -> None:
    async with oauth_servers() as servers:
        config = http(servers.mcp_url, tmp_path)
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
            assert await call(conn, "admin_reset") == ("reset done", False)
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert len(browser.prompts) == 2  # the step-up asked the person again
        assert "scope=mcp+admin" in browser.prompts[1].authorization_url
        assert [g.scopes for g in servers.state.grants] == [["mcp"], ["mcp", "admin"]]


async def test_client_id_metadata_document(tmp_path: Path, browser: Browser) -> None:
    document = "https://agentrt.example/oauth/client.json"
    redirect = f"http://127.0.0.1:{free_port()}/callback"
    async with oauth_servers(cimd=True) as servers:
        servers.state.cimd_clients[document] = redirect
        config = http(
            servers.mcp_url, tmp_path, client_metadata_url=document, redirect_uri=redirect
        )
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert servers.state.registrations == 0  # no dynamic registration
        assert [g.client_id for g in servers.state.grants] == [document]


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_pre_registered_authorization_code_client(
    tmp_path: Path, browser: Browser, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    redirect = f"http://127.0.0.1:{free_port()}/cb"
    async with oauth_servers() as servers:
        servers.state.clients["pre-1"] = OAuthClientInformationFull(
            client_id="pre-1",
            client_secret="pre-secret",
            redirect_uris=[AnyUrl(redirect)],
            token_endpoint_auth_method=method,
            grant_types=["authorization_code", "refresh_token"],
            scope=" ".join(SCOPES),
        )
        monkeypatch.setenv("PRE_SECRET", "pre-secret")
        config = http(
            servers.mcp_url,
            tmp_path,
            client_id="pre-1",
            client_secret_env="PRE_SECRET",
            token_endpoint_auth_method=method,
            redirect_uri=redirect,
            issuer=servers.issuer,
        )
        async with McpConnection(config, authorize=browser) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        assert servers.state.registrations == 0
        assert [g.client_id for g in servers.state.grants] == ["pre-1"]
        stored = next((tmp_path / "tokens").iterdir()).read_text()
        assert "pre-secret" not in stored  # configuration is not copied to disk


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_client_credentials_with_a_secret(
    tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with oauth_servers() as servers:
        servers.state.clients["machine"] = OAuthClientInformationFull(
            client_id="machine",
            client_secret="m-secret",
            token_endpoint_auth_method=method,
            grant_types=["client_credentials"],
        )
        secret_file = tmp_path / "secret"
        secret_file.write_text("m-secret\n")
        config = http(
            servers.mcp_url,
            tmp_path,
            flow="client_credentials",
            client_id="machine",
            client_secret_file=str(secret_file),
            token_endpoint_auth_method=method,
            issuer=servers.issuer,
        )
        async with McpConnection(config) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
            # Step-up without a person: a new token with the union of scopes.
            assert await call(conn, "admin_reset") == ("reset done", False)
        grants = servers.state.grants
        assert [(g.grant_type, g.auth_method) for g in grants] == [
            ("client_credentials", method),
            ("client_credentials", method),
        ]
        assert [g.scopes for g in grants] == [["mcp"], ["mcp", "admin"]]
        assert all(g.resource == servers.mcp_url for g in grants)


async def test_client_credentials_with_private_key_jwt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    async with oauth_servers() as servers:
        servers.state.public_keys["signer"] = public
        monkeypatch.setenv("SIGNER_KEY", private)
        config = http(
            servers.mcp_url,
            tmp_path,
            flow="client_credentials",
            client_id="signer",
            private_key_env="SIGNER_KEY",
            issuer=servers.issuer,
        )
        async with McpConnection(config) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
        [grant] = servers.state.grants
        assert (grant.client_id, grant.auth_method) == ("signer", "private_key_jwt")

        # A key the server does not know: refused, and the message says so.
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        monkeypatch.setenv(
            "SIGNER_KEY",
            other.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
        )
        with pytest.raises(McpAuthorizationError) as caught:
            async with McpConnection(http(servers.mcp_url, tmp_path / "b", **_jwt(servers.issuer))):
                pass
        assert "authorization required for MCP server 'secure'" in str(caught.value)
        assert "invalid_client" in str(caught.value)


def _jwt(issuer: str) -> dict[str, Any]:
    return {
        "flow": "client_credentials",
        "client_id": "signer",
        "private_key_env": "SIGNER_KEY",
        "issuer": issuer,
    }


async def test_a_401_without_auth_says_authorization_required(tmp_path: Path) -> None:
    async with oauth_servers() as servers:
        config = HttpServerConfig(name="secure", url=servers.mcp_url, connect_timeout_s=10)
        with pytest.raises(McpAuthorizationError) as caught:
            async with McpConnection(config):
                pass
    message = str(caught.value)
    assert message.startswith(f"authorization required for MCP server 'secure' ({servers.mcp_url})")
    assert "HTTP 401" in message
    assert "[mcp.secure.auth]" in message
    assert "-32603" not in message


@pytest.mark.parametrize(
    ("lie", "told", "truth"),
    [
        # the metadata's issuer, then the one the client asked
        ("wrong_issuer", ["issuer mismatch", "http://127.0.0.1:9/elsewhere"], "issuer"),
        # the protected resource the metadata names, then the server's URL
        ("wrong_resource", ["http://127.0.0.1:9/other"], "mcp_url"),
    ],
)
async def test_metadata_naming_another_server_is_refused(
    tmp_path: Path, browser: Browser, lie: str, told: list[str], truth: str
) -> None:
    async with oauth_servers(**{lie: True}) as servers:
        with pytest.raises(McpAuthorizationError) as caught:
            async with McpConnection(http(servers.mcp_url, tmp_path), authorize=browser):
                pass
    message = str(caught.value)
    assert "authorization required for MCP server 'secure'" in message
    for fragment in told:
        assert fragment in message
    assert getattr(servers, truth) in message
    assert browser.prompts == []  # nobody was sent to a server that lies about itself
    assert servers.state.grants == []


async def test_nobody_approving_times_out_with_a_clear_error(tmp_path: Path) -> None:
    seen: list[McpAuthorizationRequired] = []

    async def ignore(prompt: McpAuthorizationRequired) -> None:
        seen.append(prompt)

    async with oauth_servers() as servers:
        config = http(servers.mcp_url, tmp_path, authorization_timeout_s=0.5)
        with pytest.raises(McpAuthorizationError) as caught:
            async with McpConnection(config, authorize=ignore):
                pass
    assert "nobody approved the authorization request within 0.5 s" in str(caught.value)
    assert len(seen) == 1


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    config = http(
        "http://127.0.0.1:1/mcp",
        tmp_path,
        flow="client_credentials",
        client_id="machine",
        client_secret="do-not-print",
    )
    assert "do-not-print" not in repr(config)
    assert "do-not-print" not in str(config.model_dump())
    assert "do-not-print" not in json.dumps(config.model_dump(mode="json"))
    assert os.environ.get("AGENTRT_NOT_SET") is None


async def test_the_runtime_hands_the_url_to_the_embedding_and_offers_the_tools(
    tmp_path: Path, browser: Browser
) -> None:
    async with oauth_servers() as servers:
        backend = ScriptedBackend(["done"], name="scripted", models=["scripted"])
        config = {
            "mcp": {
                "secure": {
                    "url": servers.mcp_url,
                    "auth": {"token_dir": str(tmp_path / "tokens"), "open_browser": False},
                }
            },
            "agents": {},
        }
        async with Runtime(config, backends=[backend], on_mcp_authorization=browser) as rt:
            assert "secure__whoami" in {t.spec.name for t in rt.tools}
        assert [p.server for p in browser.prompts] == ["secure"]
        assert [g.grant_type for g in servers.state.grants] == ["authorization_code"]


def test_the_configurations_of_docs_mcp_auth_validate() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "mcp-auth.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    names: set[str] = set()
    for block in blocks:
        for name, entry in tomllib.loads(block)["mcp"].items():
            config = HttpServerConfig.model_validate({"name": name, **entry})
            assert config.auth is not None
            names.add(name)
    assert names == {"docs", "reports", "signed"}


async def test_a_call_refused_mid_session_says_authorization_required(tmp_path: Path) -> None:
    async with oauth_servers() as servers:
        servers.state.clients["machine"] = OAuthClientInformationFull(
            client_id="machine",
            client_secret="m-secret",
            token_endpoint_auth_method="client_secret_post",
            grant_types=["client_credentials"],
        )
        config = http(
            servers.mcp_url,
            tmp_path,
            flow="client_credentials",
            client_id="machine",
            client_secret="m-secret",
            token_endpoint_auth_method="client_secret_post",
        )
        async with McpConnection(config) as conn:
            assert await call(conn, "whoami") == ("an authorized client", False)
            servers.state.access.clear()  # the token is revoked...
            del servers.state.clients["machine"]  # ...and the client with it
            text, is_error = await call(conn, "whoami")
            assert is_error
            assert text.startswith(
                f"authorization required for MCP server 'secure' ({servers.mcp_url}):"
            )
            assert "invalid_client" in text
            assert "-32603" not in text
            servers.state.clients["machine"] = OAuthClientInformationFull(
                client_id="machine",
                client_secret="m-secret",
                token_endpoint_auth_method="client_secret_post",
                grant_types=["client_credentials"],
            )
            # Authorized again: the next call gets a new token and goes through.
            assert await call(conn, "whoami") == ("an authorized client", False)
