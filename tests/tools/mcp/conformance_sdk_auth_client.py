"""The yardstick for ``examples/mcp_conformance_auth_client.py``: an OAuth
client written directly on the official SDK (``OAuthClientProvider`` and
its client-credentials providers, tokens in memory), run by the MCP
conformance suite's ``auth/*`` scenarios with the server's URL as the last
argument and credentials in ``MCP_CONFORMANCE_CONTEXT``."""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import AnyUrl

REDIRECT = "http://127.0.0.1:8765/callback"


class Memory:
    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def provider(url: str, context: dict[str, Any]) -> httpx2.Auth:
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    if "private_key_pem" in context:
        signer = SignedJWTParameters(
            issuer=context["client_id"],
            subject=context["client_id"],
            signing_key=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "RS256"),
        )
        return PrivateKeyJWTOAuthProvider(
            url, Memory(), context["client_id"], signer.create_assertion_provider()
        )
    if str(context.get("name", "")).startswith("auth/client-credentials"):
        return ClientCredentialsOAuthProvider(
            url, Memory(), context["client_id"], context["client_secret"]
        )
    redirected: list[str] = []

    async def redirect_handler(authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.get(authorization_url)
            redirected.append(response.headers["location"])

    async def callback_handler() -> AuthorizationCodeResult:
        query = {k: v[0] for k, v in parse_qs(urlparse(redirected.pop()).query).items()}
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    pre = None
    if "client_secret" in context:
        pre = OAuthClientInformationFull(
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            redirect_uris=[AnyUrl(REDIRECT)],
            token_endpoint_auth_method="client_secret_basic",
        )
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(REDIRECT)],
        grant_types=["authorization_code", "refresh_token"],
        client_name="sdk-conformance",
    )
    return OAuthClientProvider(
        url,
        metadata,
        Memory(pre),
        redirect_handler,
        callback_handler,
        client_metadata_url="https://conformance-test.local/client-metadata.json",
    )


async def main(url: str) -> int:
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    failures = 0
    async with (
        create_mcp_http_client(auth=provider(url, context)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for tool in (await session.list_tools()).tools:
            result = await session.call_tool(tool.name, {}, read_timeout_seconds=20)
            print(tool.name, result.is_error)
            failures += bool(result.is_error)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
