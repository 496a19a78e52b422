"""Where an MCP server's OAuth tokens and client registration are kept:
``FileTokenStore``, the SDK's ``TokenStorage`` on one JSON file per server
(mode 0600, in a directory of mode 0700).

Must not know how tokens are obtained (``auth``), nor import agents or
aggregators.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Final, final

from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)

from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.observe._log import get_logger

__all__ = ["FileTokenStore"]

_log = get_logger(__name__)

#: Refresh this long before the access token's recorded expiry, so a token
#: does not lapse between being attached and being checked.
_EXPIRY_MARGIN_S: Final = 1.0


@final
class FileTokenStore:
    """The tokens and client registration of one server, in one file named
    after the server and a digest of its URL (a server moved to another URL
    starts afresh).  The directory is created with mode 0700 and tightened
    to it if it was wider; the file is written whole (a temporary file,
    then a rename) with mode 0600.

    ``fixed_client`` is a pre-registered client: it is what
    ``get_client_info`` answers, and it is never written to disk."""

    def __init__(
        self,
        directory: Path,
        server: str,
        url: str,
        *,
        fixed_client: OAuthClientInformationFull | None = None,
    ) -> None:
        self.directory = directory.expanduser()
        digest = hashlib.sha256(url.encode()).hexdigest()[:12]
        self.path = self.directory / f"{server}-{digest}.json"
        self._server = server
        self._fixed = fixed_client

    def __repr__(self) -> str:
        return f"FileTokenStore({str(self.path)!r})"

    # -- the SDK's TokenStorage ------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        record = self._read().get("tokens")
        if not isinstance(record, dict):
            return None
        token = OAuthToken.model_validate(record["token"])
        expires_at = record.get("expires_at")
        if isinstance(expires_at, int | float) and time.time() + _EXPIRY_MARGIN_S >= expires_at:
            if token.refresh_token is None:
                return None
            # The SDK only learns an expiry from a token it just received; an
            # access token without a value is one it refreshes before use.
            return token.model_copy(update={"access_token": "", "expires_in": None})
        if isinstance(expires_at, int | float):
            remaining = max(int(expires_at - time.time()), 0)
            token = token.model_copy(update={"expires_in": remaining})
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        record: dict[str, Any] = {"token": tokens.model_dump(mode="json", exclude_none=True)}
        if tokens.expires_in is not None:
            record["expires_at"] = time.time() + tokens.expires_in
        self._update("tokens", record)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self._fixed is not None:
            return self._fixed
        record = self._read().get("client")
        if not isinstance(record, dict):
            return None
        return OAuthClientInformationFull.model_validate(record)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self._fixed is not None and client_info.client_id == self._fixed.client_id:
            return  # configuration, not state
        self._update("client", client_info.model_dump(mode="json", exclude_none=True))

    # -- extras ----------------------------------------------------------------

    def discovery(self) -> tuple[ProtectedResourceMetadata | None, OAuthMetadata | None]:
        """The metadata discovered last time (so a stored refresh token goes
        to the right token endpoint before anything is rediscovered)."""
        record = self._read().get("discovery")
        if not isinstance(record, dict):
            return None, None
        resource = record.get("resource")
        server = record.get("server")
        return (
            ProtectedResourceMetadata.model_validate(resource) if resource else None,
            OAuthMetadata.model_validate(server) if server else None,
        )

    def set_discovery(
        self, resource: ProtectedResourceMetadata | None, server: OAuthMetadata | None
    ) -> None:
        """Keep what discovery found (see ``discovery``)."""
        self._update(
            "discovery",
            {
                "resource": resource.model_dump(mode="json", exclude_none=True)
                if resource
                else None,
                "server": server.model_dump(mode="json", exclude_none=True) if server else None,
            },
        )

    def stored_client(self) -> OAuthClientInformationFull | None:
        """The registration kept on disk (not a pre-registered one), or None."""
        record = self._read().get("client")
        return (
            OAuthClientInformationFull.model_validate(record) if isinstance(record, dict) else None
        )

    def forget(self) -> None:
        """Drop everything stored for this server (``agentrt`` logs out)."""
        self.path.unlink(missing_ok=True)

    # -- files -----------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(
                f"cannot read stored MCP tokens {str(self.path)!r}: {exc}",
                where=f"mcp server {self._server!r}: auth.token_dir",
            ) from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            _log.warning("mcp.auth.store_corrupt", server=self._server, path=str(self.path))
            return {}
        return data if isinstance(data, dict) else {}

    def _update(self, key: str, value: dict[str, Any]) -> None:
        data = self._read()
        data[key] = value
        self._ensure_directory()
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to an existing file
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        os.replace(temporary, self.path)

    def _ensure_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            mode = stat.S_IMODE(self.directory.stat().st_mode)
            if mode & 0o077:
                os.chmod(self.directory, 0o700)
        except OSError as exc:
            raise ConfigError(
                f"cannot prepare the token directory {str(self.directory)!r}: {exc}",
                where=f"mcp server {self._server!r}: auth.token_dir",
            ) from exc
