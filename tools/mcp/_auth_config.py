"""User configuration of OAuth for an MCP server reached over HTTP (pydantic).

Owns ``McpAuthConfig`` (``[mcp.NAME.auth]`` in ``agentrt.toml``): which
grant (authorization code with PKCE, or client credentials), how the client
is identified (pre-registered, a client ID metadata document, or dynamic
registration), how it authenticates at the token endpoint, where secrets
come from (the environment or files, never the file itself) and where
tokens are kept.  Pure data and validation: no I/O at import, no SDK
imports.  Must not import agents or aggregators.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from agentrt.runtime.kernel._errors import ConfigError

__all__ = ["McpAuthConfig", "default_token_dir"]

TokenEndpointAuth = Literal["none", "client_secret_basic", "client_secret_post", "private_key_jwt"]


def default_token_dir() -> Path:
    """Where tokens are kept unless ``token_dir`` says otherwise:
    ``$AGENTRT_MCP_TOKEN_DIR``, else ``$XDG_STATE_HOME/agentrt/mcp-tokens``,
    else ``~/.local/state/agentrt/mcp-tokens``."""
    given = os.environ.get("AGENTRT_MCP_TOKEN_DIR")
    if given:
        return Path(given)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "agentrt" / "mcp-tokens"


class McpAuthConfig(BaseModel):
    """OAuth 2.1 for one MCP server, on the official SDK's client support.

    Discovery (protected-resource metadata, then authorization-server
    metadata, with the spec's fallbacks), scope selection
    (``WWW-Authenticate``, then ``scopes_supported``), step-up on 403
    ``insufficient_scope``, the RFC 8707 ``resource`` parameter and token
    refresh are automatic; this says what only the user can know."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flow: Literal["authorization_code", "client_credentials"] = "authorization_code"
    """``authorization_code`` (with PKCE: a person approves in a browser) or
    ``client_credentials`` (a machine client with its own credentials)."""
    client_id: str | None = None
    """A pre-registered client.  Without it, ``authorization_code`` uses
    ``client_metadata_url`` when the server supports client ID metadata
    documents, else dynamic client registration; ``client_credentials``
    needs it."""
    client_secret: SecretStr | None = None
    """The client secret (prefer ``client_secret_env`` or ``client_secret_file``
    so it stays out of the configuration file); never logged."""
    client_secret_env: str | None = None
    """Read the client secret from this environment variable."""
    client_secret_file: Path | None = None
    """Read the client secret from this file (surrounding whitespace dropped)."""
    token_endpoint_auth_method: TokenEndpointAuth | None = None
    """How the client authenticates at the token endpoint; by default
    ``private_key_jwt`` with a private key, ``client_secret_basic`` with a
    secret, ``none`` otherwise."""
    private_key_file: Path | None = None
    """PEM private key that signs ``private_key_jwt`` client assertions."""
    private_key_env: str | None = None
    """Read that PEM private key from this environment variable instead."""
    signing_algorithm: str = "RS256"
    """JWS algorithm of the client assertion (``RS256``, ``ES256``...)."""
    client_metadata_url: str | None = None
    """An HTTPS URL of this client's metadata document, used as its client ID
    where the authorization server supports client ID metadata documents."""
    issuer: str | None = None
    """The authorization server's issuer the credentials belong to; with it,
    they are never sent to another server the MCP server points at."""
    scope: str | None = None
    """Scopes to ask for up front (space separated); by default those the
    server names in ``WWW-Authenticate`` or its ``scopes_supported``."""
    redirect_uri: str = "http://127.0.0.1:0/callback"
    """Loopback address the browser is sent back to after approval; port 0
    picks a free port once and keeps it with the stored registration."""
    client_name: str = "agentrt"
    """The name dynamic registration asks the authorization server to show."""
    open_browser: bool = True
    """Open the authorization URL in a browser when a person must approve
    (the URL is also logged and handed to the embedding's callback)."""
    authorization_timeout_s: float = Field(default=300.0, gt=0)
    """How long to wait for the person to approve before giving up."""
    token_dir: Path | None = None
    """Directory of the stored tokens (mode 0700, one 0600 file per server);
    ``default_token_dir()`` when None."""

    @model_validator(mode="after")
    def _coherent(self) -> McpAuthConfig:
        secrets = [
            n
            for n, v in (
                ("client_secret", self.client_secret),
                ("client_secret_env", self.client_secret_env),
                ("client_secret_file", self.client_secret_file),
            )
            if v is not None
        ]
        if len(secrets) > 1:
            raise ValueError(f"give one of {', '.join(secrets)}, not several")
        if self.private_key_file is not None and self.private_key_env is not None:
            raise ValueError("give private_key_file or private_key_env, not both")
        method = self.auth_method()
        has_key = self.private_key_file is not None or self.private_key_env is not None
        if method == "private_key_jwt" and not has_key:
            raise ValueError("private_key_jwt needs private_key_file or private_key_env")
        if method in ("client_secret_basic", "client_secret_post") and not secrets:
            raise ValueError(f"{method} needs a client secret (client_secret_env or _file)")
        if self.flow == "client_credentials":
            if self.client_id is None:
                raise ValueError("the client_credentials flow needs a client_id")
            if method == "none":
                raise ValueError(
                    "the client_credentials flow needs a client secret or a private key"
                )
        elif method == "private_key_jwt":
            raise ValueError("private_key_jwt is supported with the client_credentials flow only")
        if (secrets or has_key) and self.client_id is None:
            raise ValueError("a client secret or key needs the client_id it belongs to")
        return self

    @model_validator(mode="after")
    def _urls(self) -> McpAuthConfig:
        if self.client_metadata_url is not None:
            url = urlparse(self.client_metadata_url)
            if url.scheme != "https" or url.path in ("", "/"):
                raise ValueError("client_metadata_url must be an https URL with a path")
        redirect = urlparse(self.redirect_uri)
        if redirect.scheme != "http" or redirect.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(
                f"redirect_uri {self.redirect_uri!r} must be a loopback http URL "
                "(http://127.0.0.1:PORT/PATH), where agentrt receives the redirect"
            )
        if self.issuer is not None and urlparse(self.issuer).scheme not in ("http", "https"):
            raise ValueError(f"issuer {self.issuer!r} must be an http(s) URL")
        return self

    def auth_method(self) -> TokenEndpointAuth:
        """The token-endpoint authentication method in effect."""
        if self.token_endpoint_auth_method is not None:
            return self.token_endpoint_auth_method
        if self.private_key_file is not None or self.private_key_env is not None:
            return "private_key_jwt"
        if (
            self.client_secret is not None
            or self.client_secret_env is not None
            or self.client_secret_file is not None
        ):
            return "client_secret_basic"
        return "none"

    @property
    def interactive(self) -> bool:
        """True when a person may have to approve (the authorization code flow)."""
        return self.flow == "authorization_code"

    def secret(self, where: str) -> str | None:
        """The client secret from wherever it is configured, or None.

        Raises ``ConfigError`` (naming ``where``) for an unset variable or an
        unreadable or empty file."""
        if self.client_secret is not None:
            return self.client_secret.get_secret_value()
        if self.client_secret_env is not None:
            return _from_env(self.client_secret_env, "client secret", where)
        if self.client_secret_file is not None:
            return _from_file(self.client_secret_file, "client secret", where)
        return None

    def private_key(self, where: str) -> str | None:
        """The PEM private key for ``private_key_jwt``, or None (raises
        ``ConfigError`` like ``secret``)."""
        if self.private_key_env is not None:
            return _from_env(self.private_key_env, "private key", where)
        if self.private_key_file is not None:
            return _from_file(self.private_key_file, "private key", where)
        return None

    def tokens_in(self) -> Path:
        """The token directory in effect."""
        return self.token_dir if self.token_dir is not None else default_token_dir()


def _from_env(variable: str, what: str, where: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ConfigError(f"environment variable {variable!r} (the {what}) is not set", where=where)
    return value


def _from_file(path: Path, what: str, where: str) -> str:
    try:
        value = path.expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} from {str(path)!r}: {exc}", where=where) from exc
    if not value:
        raise ConfigError(f"the {what} file {str(path)!r} is empty", where=where)
    return value
