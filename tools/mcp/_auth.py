"""OAuth for MCP servers over HTTP, on the official SDK's client support.

Owns ``McpAuth`` (one per connection: the SDK provider the configuration
asks for, its token store, and the record of why authorization failed),
``LoopbackRedirect`` (receives the browser's redirect on the loopback
port), ``AuthorizationHandler`` (how a person is shown the authorization
URL: a browser, the daemon's event, an embedding's callback) and
``McpAuthorizationError``.  The SDK does discovery, registration, PKCE,
scopes and step-up, the ``resource`` parameter and refresh.

Must not import agents or aggregators.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import warnings
import webbrowser
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final, final
from urllib.parse import parse_qs, urlparse, urlunparse

import anyio
import anyio.abc
import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.utils import issuers_match
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import AnyUrl, ValidationError

from agentrt.protocols._events import McpAuthorizationRequired
from agentrt.runtime.kernel._errors import ToolError
from agentrt.runtime.observe._log import get_logger
from agentrt.tools.mcp._auth_config import McpAuthConfig
from agentrt.tools.mcp._auth_store import FileTokenStore
from agentrt.tools.mcp._mcp_config import HttpServerConfig
from agentrt.tools.mcp._mcp_errors import McpServerError

__all__ = [
    "AuthorizationHandler",
    "LoopbackRedirect",
    "McpAuth",
    "McpAuthorizationError",
]

_log = get_logger(__name__)

AuthorizationHandler = Callable[[McpAuthorizationRequired], Awaitable[None]]
"""Shows a person the URL where they approve agentrt's access to an MCP
server (a browser tab, a daemon event, an IDE prompt).  It must return
promptly: the approval arrives later, as the browser's redirect to
``redirect_uri`` (agentrt's loopback listener)."""

#: How long one connection to the loopback listener may take to send its request.
_REQUEST_READ_S: Final = 10.0
_MAX_REQUEST_BYTES: Final = 16384
_GRANTS: Final = ["authorization_code", "refresh_token"]


class McpAuthorizationError(McpServerError):
    """An MCP server wants authorization agentrt could not obtain: no
    ``auth`` is configured, the person did not approve in time, or the
    authorization server misbehaved (named in the message)."""

    def __init__(self, server: str, url: str, detail: str) -> None:
        self.server = server
        self.url = url
        ToolError.__init__(
            self, f"authorization required for MCP server {server!r} ({url}): {detail}"
        )


class LoopbackRedirect:
    """Receives the authorization server's redirect on a loopback port: the
    one request to ``redirect_uri`` that carries ``code`` and ``state`` (or
    ``error``).  Other requests get a 404 and are ignored."""

    def __init__(self, redirect_uri: str) -> None:
        parsed = urlparse(redirect_uri)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.path = parsed.path or "/"
        self._listener: anyio.abc.SocketListener | None = None

    async def open(self) -> None:
        """Start listening (before the person is sent to the authorization URL)."""
        await self.close()
        try:
            multi = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        except OSError as exc:
            raise OAuthFlowError(
                f"cannot listen for the authorization redirect on {self.host}:{self.port}: {exc}"
            ) from exc
        listener = multi.listeners[0]  # one address: one listener
        assert isinstance(listener, anyio.abc.SocketListener)
        self._listener = listener

    async def close(self) -> None:
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await listener.aclose()

    async def receive(self, timeout_s: float) -> AuthorizationCodeResult:
        """The code and state of the redirect; ``OAuthFlowError`` when the
        authorization server reports an error or nothing comes in time."""
        if self._listener is None:
            raise OAuthFlowError("the redirect listener is not open")
        listener = self._listener
        try:
            with anyio.fail_after(timeout_s):
                while True:
                    result = await self._one(listener)
                    if result is not None:
                        return result
        except TimeoutError:
            raise OAuthFlowError(
                f"nobody approved the authorization request within {timeout_s:g} s"
            ) from None
        finally:
            await self.close()

    async def _one(self, listener: anyio.abc.SocketListener) -> AuthorizationCodeResult | None:
        stream = await listener.accept()
        async with stream:
            request = b""
            with anyio.move_on_after(_REQUEST_READ_S):
                while b"\r\n\r\n" not in request and len(request) < _MAX_REQUEST_BYTES:
                    try:
                        request += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
            line = request.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            target = urlparse(parts[1]) if len(parts) >= 2 and parts[0] == "GET" else None
            if target is None or target.path != self.path:
                await _respond(stream, 404, "Not the authorization redirect.")
                return None
            query = {k: v[0] for k, v in parse_qs(target.query).items()}
            if "error" in query:
                await _respond(stream, 400, "Authorization was refused; you can close this tab.")
                detail = query.get("error_description", "")
                raise OAuthFlowError(
                    f"the authorization server refused: {query['error']}"
                    + (f" ({detail})" if detail else "")
                )
            if "code" not in query:
                await _respond(stream, 400, "The redirect carried no authorization code.")
                return None
            await _respond(stream, 200, "agentrt is authorized; you can close this tab.")
            return AuthorizationCodeResult(
                code=query["code"], state=query.get("state"), iss=query.get("iss")
            )


async def _respond(stream: anyio.abc.SocketStream, status: int, text: str) -> None:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    body = f"<!doctype html><title>agentrt</title><p>{text}</p>".encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(head + body)


def _has_desktop() -> bool:
    """Whether a graphical browser can open here: without a display,
    ``webbrowser`` would start a console browser in the user's terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _free_loopback_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _with_port(uri: str, port: int) -> str:
    parsed = urlparse(uri)
    host = parsed.hostname or "127.0.0.1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunparse(parsed._replace(netloc=netloc))


class _CodeFlowProvider(OAuthClientProvider):
    """The SDK's authorization-code provider, held to a configured issuer:
    with ``issuer`` set, an MCP server that names other authorization
    servers only is refused rather than followed."""

    def __init__(self, *args: object, issuer: str | None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._issuer = issuer

    def _select_authorization_server(self, advertised: list[str]) -> str:
        if self._issuer is None:
            return advertised[0]
        for server in advertised:
            if issuers_match(server, self._issuer):
                return server
        raise OAuthFlowError(
            f"the MCP server names authorization servers {advertised}, "
            f"not the configured issuer {self._issuer}"
        )


@final
class McpAuth:
    """OAuth for one HTTP server connection: ``httpx_auth()`` is the
    ``httpx2.Auth`` its client sends every request through (the same
    provider across reconnects, so tokens and discovered metadata are
    reused), and ``failure`` says why the last request was refused for
    want of authorization (None once one succeeds).

    ``authorize`` is told the authorization URL when a person must approve
    (besides the log and, if configured, a browser)."""

    def __init__(
        self, config: HttpServerConfig, *, authorize: AuthorizationHandler | None = None
    ) -> None:
        self.server = config.name
        self.url = config.url
        self.config: McpAuthConfig | None = config.auth
        self._authorize = authorize
        self.failure: str | None = None
        self._where = f"mcp server {config.name!r}: auth"
        self._provider: httpx2.Auth | None = None
        self.store: FileTokenStore | None = None
        self.redirect_uri: str | None = None
        self._redirect: LoopbackRedirect | None = None
        if self.config is not None:
            self._provider = self._build(self.config)

    @property
    def wait_s(self) -> float:
        """Extra time a connection attempt may take while a person approves."""
        return (
            self.config.authorization_timeout_s if self.config and self.config.interactive else 0.0
        )

    def httpx_auth(self) -> httpx2.Auth:
        """The auth every request of this server's HTTP client goes through."""
        return _Guard(self, self._provider)

    def error(self) -> McpAuthorizationError | None:
        """The authorization failure behind the last refused request, if any."""
        if self.failure is None:
            return None
        return McpAuthorizationError(self.server, self.url, self.failure)

    # -- building the SDK provider --------------------------------------------

    def _build(self, auth: McpAuthConfig) -> httpx2.Auth:
        method = auth.auth_method()
        secret = auth.secret(self._where)
        fixed: OAuthClientInformationFull | None = None
        if auth.flow == "client_credentials":
            assert auth.client_id is not None  # validated
            self.store = FileTokenStore(auth.tokens_in(), self.server, self.url)
            with warnings.catch_warnings():
                # Without ``issuer`` the SDK warns that the MCP server picks the
                # authorization server; that is the user's documented choice here.
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                if method == "private_key_jwt":
                    key = auth.private_key(self._where)
                    assert key is not None  # validated
                    signer = SignedJWTParameters(
                        issuer=auth.client_id,
                        subject=auth.client_id,
                        signing_key=key,
                        signing_algorithm=auth.signing_algorithm,
                    )
                    return PrivateKeyJWTOAuthProvider(
                        server_url=self.url,
                        storage=self.store,
                        client_id=auth.client_id,
                        assertion_provider=signer.create_assertion_provider(),
                        scope=auth.scope,
                        issuer=auth.issuer,
                    )
                assert secret is not None
                assert method in ("client_secret_basic", "client_secret_post")
                return ClientCredentialsOAuthProvider(
                    server_url=self.url,
                    storage=self.store,
                    client_id=auth.client_id,
                    client_secret=secret,
                    token_endpoint_auth_method=method,
                    scope=auth.scope,
                    issuer=auth.issuer,
                )
        redirect_uri = auth.redirect_uri
        if auth.client_id is not None:
            fixed = OAuthClientInformationFull(
                client_id=auth.client_id,
                client_secret=secret,
                redirect_uris=[AnyUrl(redirect_uri)],
                token_endpoint_auth_method=method,
                grant_types=list(_GRANTS),
            )
        store = FileTokenStore(auth.tokens_in(), self.server, self.url, fixed_client=fixed)
        self.store = store
        if urlparse(redirect_uri).port == 0:
            redirect_uri = self._remembered_redirect(store, redirect_uri)
            if fixed is not None:
                fixed.redirect_uris = [AnyUrl(redirect_uri)]
        self.redirect_uri = redirect_uri
        self._redirect = LoopbackRedirect(redirect_uri)
        metadata = OAuthClientMetadata(
            redirect_uris=[AnyUrl(redirect_uri)],
            token_endpoint_auth_method=method if method != "private_key_jwt" else None,
            grant_types=list(_GRANTS),
            response_types=["code"],
            scope=auth.scope,
            client_name=auth.client_name,
        )
        try:
            return _CodeFlowProvider(
                self.url,
                metadata,
                store,
                self._hand_to_person,
                self._await_redirect,
                client_metadata_url=auth.client_metadata_url,
                issuer=auth.issuer,
            )
        except (ValueError, ValidationError) as exc:
            raise McpAuthorizationError(self.server, self.url, str(exc)) from exc

    def _remembered_redirect(self, store: FileTokenStore, configured: str) -> str:
        """Port 0: the redirect URI of the stored registration (it was
        registered with that port), else a free port chosen now."""
        stored = store.stored_client()
        wanted = urlparse(configured)
        for uri in (stored.redirect_uris or []) if stored is not None else []:
            seen = urlparse(str(uri))
            if (seen.hostname, seen.path) == (wanted.hostname, wanted.path) and seen.port:
                return str(uri)
        return _with_port(configured, _free_loopback_port(wanted.hostname or "127.0.0.1"))

    # -- the person in the loop -----------------------------------------------

    async def _hand_to_person(self, authorization_url: str) -> None:
        assert self.config is not None
        assert self._redirect is not None
        assert self.redirect_uri is not None
        await self._redirect.open()
        prompt = McpAuthorizationRequired(
            server=self.server,
            server_url=self.url,
            authorization_url=authorization_url,
            redirect_uri=self.redirect_uri,
            expires_in_s=self.config.authorization_timeout_s,
            ts=time.time(),
        )
        _log.warning(
            "mcp.auth.approval_needed",
            server=self.server,
            url=self.url,
            authorization_url=authorization_url,
        )
        if self._authorize is not None:
            await self._authorize(prompt)
        if self.config.open_browser and _has_desktop():
            opened = await anyio.to_thread.run_sync(webbrowser.open, authorization_url)
            _log.info("mcp.auth.browser", server=self.server, opened=opened)

    async def _await_redirect(self) -> AuthorizationCodeResult:
        assert self.config is not None
        assert self._redirect is not None
        return await self._redirect.receive(self.config.authorization_timeout_s)


class _Guard(httpx2.Auth):
    """Runs each request through the SDK provider (if any) and records why
    authorization failed instead of letting the SDK's exception kill the
    transport's writer: the request then ends with the last response, which
    the transport reports as an error the connection explains with
    ``McpAuth.error()``."""

    requires_response_body = True

    def __init__(self, owner: McpAuth, inner: httpx2.Auth | None) -> None:
        self._owner = owner
        self._inner = inner
        self._primed = False
        self._remembered: tuple[object, object] = (None, None)

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        owner = self._owner
        self._prime()
        if self._inner is None:
            response = yield request
            self._judge(response)
            return
        flow = self._inner.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    self._judge(response)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            self._remember()
            return
        except (OAuthFlowError, ValidationError, ValueError, httpx2.HTTPError) as exc:
            owner.failure = _explain(exc)
            _log.warning("mcp.auth.failed", server=owner.server, url=owner.url, error=owner.failure)
        finally:
            await flow.aclose()
        # The transport must see this request fail, not the last response of the
        # OAuth exchange (a registration's 201 would read as a malformed answer):
        # sent once more without credentials, the server refuses it with a 401.
        request.headers.pop("Authorization", None)
        yield request

    def _judge(self, response: httpx2.Response) -> None:
        owner = self._owner
        if response.status_code in (401, 403) and "www-authenticate" in response.headers:
            challenge = response.headers["www-authenticate"]
            owner.failure = (
                f"the server answered HTTP {response.status_code} ({challenge[:200]})"
                + ("" if self._inner is not None else f"; configure [mcp.{owner.server}.auth]")
            )
        elif response.status_code == 401:
            owner.failure = "the server answered HTTP 401" + (
                "" if self._inner is not None else f"; configure [mcp.{owner.server}.auth]"
            )
        elif response.status_code < 400:
            owner.failure = None

    def _prime(self) -> None:
        """Give the SDK provider what it keeps only in memory.  Tokens loaded
        from the store carry their remaining lifetime, but the SDK computes
        an expiry only for tokens it just received: told, it refreshes a
        token that lapses mid-session instead of re-authorizing.  And the
        metadata discovered last time, so a stored refresh token goes to the
        authorization server's token endpoint, not the MCP server's origin."""
        inner, store = self._inner, self._owner.store
        if not isinstance(inner, OAuthClientProvider):
            return
        context = inner.context
        tokens = context.current_tokens
        if tokens is not None and context.token_expiry_time is None and tokens.expires_in:
            context.update_token_expiry(tokens)
        if context.oauth_metadata is None and store is not None and not self._primed:
            self._primed = True
            resource, server = store.discovery()
            if server is not None:
                context.protected_resource_metadata = resource
                context.oauth_metadata = server
                if resource is not None and resource.authorization_servers:
                    context.auth_server_url = str(resource.authorization_servers[0])

    def _remember(self) -> None:
        inner, store = self._inner, self._owner.store
        if not isinstance(inner, OAuthClientProvider) or store is None:
            return
        context = inner.context
        found = (context.protected_resource_metadata, context.oauth_metadata)
        if context.oauth_metadata is not None and found != self._remembered:
            self._remembered = found
            store.set_discovery(*found)


def _explain(exc: BaseException) -> str:
    if isinstance(exc, httpx2.HTTPError):
        where = ""
        with contextlib.suppress(RuntimeError):  # an error raised before any request
            where = f" at {exc.request.url}"
        return f"the authorization server could not be reached{where}: {type(exc).__name__}: {exc}"
    if isinstance(exc, ValidationError):
        return f"malformed OAuth metadata or token response: {exc.errors()[0].get('msg', exc)}"
    return str(exc) or type(exc).__name__
