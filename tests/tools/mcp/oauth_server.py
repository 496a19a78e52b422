"""An OAuth-protected MCP server for the auth tests, on the SDK's
server-side auth: an authorization server (the SDK's metadata, authorize,
register and token routes over an in-memory provider) and a resource
server (an ``MCPServer`` with ``AuthSettings`` and a token verifier), each
on its own loopback port under uvicorn.

Added around the SDK where it has no support: the ``client_credentials``
grant (``client_secret_basic``, ``client_secret_post``, ``private_key_jwt``)
at the token endpoint, and a per-tool scope check (``admin_reset`` needs
``admin``: HTTP 403 ``insufficient_scope``).  Faults for the bad-input
tests: ``wrong_issuer`` (metadata names another issuer) and
``wrong_resource`` (protected-resource metadata names another resource).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

import anyio
import jwt
import uvicorn
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken, ProtectedResourceMetadata
from pydantic import AnyHttpUrl, AnyUrl
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SCOPES = ["mcp", "admin"]


@dataclass
class Grant:
    """One token the authorization server issued, for assertions."""

    grant_type: str
    client_id: str
    scopes: list[str]
    resource: str | None
    auth_method: str = ""


@dataclass
class AuthServerState:
    """The in-memory provider (the SDK's ``OAuthAuthorizationServerProvider``)."""

    issuer: str = ""
    issuer_as_published: str = ""
    """The issuer as the metadata spells it (RFC 9207 ``iss`` compares strings)."""
    resource: str = ""
    access_ttl_s: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    public_keys: dict[str, str] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)
    registrations: int = 0
    cimd_clients: dict[str, str] = field(default_factory=dict)
    """Client ID metadata document URL -> the redirect URI it lists."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id in self.cimd_clients and client_id not in self.clients:
            # A client ID metadata document: a real server fetches it; this one trusts it.
            self.clients[client_id] = OAuthClientInformationFull(
                client_id=client_id,
                token_endpoint_auth_method="none",
                redirect_uris=[AnyUrl(self.cimd_clients[client_id])],
                grant_types=["authorization_code", "refresh_token"],
                scope=" ".join(SCOPES),
            )
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.registrations += 1
        # This server lets every client ask for every scope (step-up included).
        self.clients[client_info.client_id] = client_info.model_copy(
            update={"scope": " ".join(SCOPES)}
        )

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        # The person approves at once: straight back to the client with the code.
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer_as_published
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self.issue(
            "authorization_code",
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            with_refresh=True,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        return self.issue(
            "refresh_token",
            client.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            with_refresh=True,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not accepted here")

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.load_access_token(token)

    def issue(
        self,
        grant_type: str,
        client_id: str,
        scopes: list[str],
        resource: str | None,
        *,
        with_refresh: bool,
        auth_method: str = "",
    ) -> OAuthToken:
        access = secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_ttl_s,
            resource=resource,
        )
        refresh = None
        if with_refresh:
            refresh = secrets.token_urlsafe(24)
            self.refresh[refresh] = RefreshToken(
                token=refresh, client_id=client_id, scopes=scopes, resource=resource
            )
        self.grants.append(Grant(grant_type, client_id, scopes, resource, auth_method))
        return OAuthToken(
            access_token=access,
            expires_in=self.access_ttl_s,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )


def _form(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode()).items()}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


def client_credentials_endpoint(state: AuthServerState, sdk_app: ASGIApp) -> ASGIApp:
    """The token endpoint: ``client_credentials`` here, the rest to the SDK."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/token":
            await sdk_app(scope, receive, send)
            return
        body = await _read_body(receive)
        form = _form(body)
        if form.get("grant_type") != "client_credentials":
            await sdk_app(scope, _replay(body, receive), send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        client_id, method, ok = _authenticate(state, form, headers)
        if not ok:
            response: Response = JSONResponse({"error": "invalid_client"}, status_code=401)
        else:
            scopes = form.get("scope", "mcp").split()
            token = state.issue(
                "client_credentials",
                client_id,
                scopes,
                form.get("resource"),
                with_refresh=False,
                auth_method=method,
            )
            response = JSONResponse(token.model_dump(mode="json", exclude_none=True))
        await response(scope, receive, send)

    return app


def _authenticate(
    state: AuthServerState, form: dict[str, str], headers: dict[str, str]
) -> tuple[str, str, bool]:
    auth = headers.get("authorization", "")
    if auth.startswith("Basic "):
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        client = state.clients.get(unquote(user))
        good = client is not None and client.client_secret == unquote(password)
        return unquote(user), "client_secret_basic", good
    if (
        form.get("client_assertion_type")
        == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    ):
        unverified = jwt.decode(form["client_assertion"], options={"verify_signature": False})
        client_id = str(unverified.get("sub", ""))
        key = state.public_keys.get(client_id)
        if key is None:
            return client_id, "private_key_jwt", False
        try:
            audience = [state.issuer, state.issuer_as_published]
            jwt.decode(form["client_assertion"], key, algorithms=["RS256"], audience=audience)
        except jwt.PyJWTError:
            return client_id, "private_key_jwt", False
        return client_id, "private_key_jwt", True
    client_id = form.get("client_id", "")
    client = state.clients.get(client_id)
    good = client is not None and client.client_secret == form.get("client_secret")
    return client_id, "client_secret_post", good


def scope_guard(state: AuthServerState, app: ASGIApp, metadata_url: str) -> ASGIApp:
    """``admin_reset`` needs the ``admin`` scope: 403 ``insufficient_scope``."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await _read_body(receive)
        try:
            message: Any = json.loads(body)
        except json.JSONDecodeError:
            message = None
        wants_admin = (
            isinstance(message, dict)
            and message.get("method") == "tools/call"
            and message.get("params", {}).get("name") == "admin_reset"
        )
        if wants_admin:
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            token = headers.get("authorization", "").removeprefix("Bearer ")
            found = await state.load_access_token(token)
            if found is not None and "admin" not in found.scopes:
                challenge = (
                    'Bearer error="insufficient_scope", scope="mcp admin", '
                    f'resource_metadata="{metadata_url}"'
                )
                response = JSONResponse(
                    {"error": "insufficient_scope"},
                    status_code=403,
                    headers={"WWW-Authenticate": challenge},
                )
                await response(scope, receive, send)
                return
        await app(scope, _replay(body, receive), send)

    return guarded


@dataclass
class OAuthServers:
    """The running pair, and what the tests configure and check."""

    state: AuthServerState
    issuer: str
    mcp_url: str

    def daemon_server(self, token_dir: Path) -> dict[str, Any]:
        """The ``[mcp.<name>]`` table of a daemon that connects to the
        resource server when a person approves in a browser: optional, its
        tokens kept in ``token_dir``, waiting a minute for the approval."""
        return {
            "url": self.mcp_url,
            "required": False,
            "auth": {
                "token_dir": str(token_dir),
                "open_browser": False,
                "authorization_timeout_s": 60,
            },
        }


def _bound() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def oauth_servers(
    *,
    access_ttl_s: int = 3600,
    cimd: bool = False,
    wrong_issuer: bool = False,
    wrong_resource: bool = False,
) -> AsyncIterator[OAuthServers]:
    """Start the authorization server and the protected MCP server."""
    as_sock, rs_sock = _bound(), _bound()
    issuer = f"http://127.0.0.1:{as_sock.getsockname()[1]}"
    rs_base = f"http://127.0.0.1:{rs_sock.getsockname()[1]}"
    mcp_url = f"{rs_base}/mcp"
    state = AuthServerState(issuer=issuer, resource=mcp_url, access_ttl_s=access_ttl_s)

    registration = ClientRegistrationOptions(enabled=True, valid_scopes=SCOPES)
    routes = create_auth_routes(
        provider=state,
        issuer_url=AnyHttpUrl(issuer),
        client_registration_options=registration,
        revocation_options=RevocationOptions(enabled=False),
    )
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, RevocationOptions())
    metadata = metadata.model_copy(
        update={
            "scopes_supported": SCOPES,
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "token_endpoint_auth_methods_supported": [
                "none",
                "client_secret_basic",
                "client_secret_post",
                "private_key_jwt",
            ],
            "client_id_metadata_document_supported": cimd or None,
            "issuer": AnyHttpUrl("http://127.0.0.1:9/elsewhere")
            if wrong_issuer
            else metadata.issuer,
        }
    )
    routes[0] = Route(
        "/.well-known/oauth-authorization-server",
        endpoint=MetadataHandler(metadata).handle,
        methods=["GET"],
    )
    state.issuer_as_published = str(metadata.issuer)
    as_app = client_credentials_endpoint(state, Starlette(routes=routes))

    server = MCPServer(
        "protected",
        token_verifier=state,
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(mcp_url),
            required_scopes=["mcp"],
            validate_token_resource=True,
        ),
    )

    @server.tool(description="Who is calling.")
    async def whoami() -> str:
        return "an authorized client"

    @server.tool(description="Needs the admin scope.")
    async def admin_reset() -> str:
        return "reset done"

    rs_inner = server.streamable_http_app()
    metadata_url = f"{rs_base}/.well-known/oauth-protected-resource/mcp"
    if wrong_resource:
        prm = ProtectedResourceMetadata(
            resource=AnyHttpUrl("http://127.0.0.1:9/other"),
            authorization_servers=[AnyHttpUrl(issuer)],
            scopes_supported=["mcp"],
        )
        body = prm.model_dump_json(exclude_none=True).encode()
        inner = rs_inner

        async def lying(scope: Scope, receive: Receive, send: Send) -> None:
            if (
                scope["type"] == "http"
                and scope["path"] == "/.well-known/oauth-protected-resource/mcp"
            ):
                await Response(body, media_type="application/json")(scope, receive, send)
                return
            await inner(scope, receive, send)

        rs_app: ASGIApp = scope_guard(state, lying, metadata_url)
    else:
        rs_app = scope_guard(state, rs_inner, metadata_url)

    apps: list[tuple[ASGIApp, Literal["on", "off"]]] = [(as_app, "off"), (rs_app, "on")]
    servers = [
        uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=1)
        )
        for app, lifespan in apps
    ]
    stopped = [anyio.Event() for _ in servers]

    async def serve(server: uvicorn.Server, sock: socket.socket, done: anyio.Event) -> None:
        try:
            await server.serve([sock])
        finally:
            done.set()

    with as_sock, rs_sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, servers[0], as_sock, stopped[0])
            tg.start_soon(serve, servers[1], rs_sock, stopped[1])
            with anyio.fail_after(10):
                while not all(s.started for s in servers):  # noqa: ASYNC110 - uvicorn offers no event
                    await anyio.sleep(0.02)
            try:
                yield OAuthServers(state=state, issuer=issuer, mcp_url=mcp_url)
            finally:
                # Stop gracefully even when the test failed: an error reaching the
                # task group would cancel uvicorn mid-lifespan and hang the loop's close.
                for s in servers:
                    s.should_exit = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    for done in stopped:
                        await done.wait()
