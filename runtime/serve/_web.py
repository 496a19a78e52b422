"""The daemon's web page: ``/`` (the page) and ``/static/<name>`` (its
scripts and stylesheet), read once from the package data in
``agentrt/runtime/serve/web/`` with ``importlib.resources``.

The page is static: plain HTML, CSS and ES modules with no build step and
nothing fetched from elsewhere (it works offline); everything it shows comes
from the daemon's JSON API and the run event stream.  Responses carry an
ETag (a conditional GET gets 304), ``Cache-Control: no-cache`` so a new
daemon's page is picked up at once, and a Content-Security-Policy that
allows only same-origin scripts, styles and connections.

Owns only these routes; imports Starlette, the protocols and the error
tree, nothing else of the daemon (the API the page calls lives in
``agentrt.runtime.serve._app``).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import final

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt.protocols._api import ApiError
from agentrt.runtime.kernel._errors import ConfigError

PACKAGE = "agentrt.runtime.serve"
FOLDER = "web"
INDEX = "index.html"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}

_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
}

# An ``ApiError`` body, like every other 4xx of the daemon.
_NOT_FOUND = msgspec.json.encode(
    ApiError(error="not_found", message="no such file of the web page", where="path", status=404)
)


@final
class WebAsset:
    """One file of the page, held in memory with its type and ETag."""

    __slots__ = ("body", "etag", "media_type", "name")

    def __init__(self, name: str, body: bytes, media_type: str) -> None:
        self.name = name
        self.body = body
        self.media_type = media_type
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'

    def response(self, request: Request) -> Response:
        headers = {**_HEADERS, "ETag": self.etag}
        if self.etag in _etags(request.headers.get("if-none-match", "")):
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def _etags(header: str) -> set[str]:
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return tags - {""}


def load_assets() -> dict[str, WebAsset]:
    """Every servable file of the page's folder, by file name."""
    folder = resources.files(PACKAGE).joinpath(FOLDER)
    if not folder.is_dir():
        raise ConfigError(
            f"the web page's files are missing: no folder {FOLDER!r} in package {PACKAGE} "
            "(is the package data installed? pyproject needs the web/* package-data glob)",
            where="runtime/serve/web",
        )
    assets: dict[str, WebAsset] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        media_type = _TYPES.get(suffix)
        if media_type is None or not entry.is_file():
            continue
        assets[entry.name] = WebAsset(entry.name, entry.read_bytes(), media_type)
    if INDEX not in assets:
        raise ConfigError(
            f"the web page's {INDEX} is missing from package {PACKAGE}/{FOLDER}",
            where="runtime/serve/web",
        )
    return assets


def web_routes() -> list[BaseRoute]:
    """The routes serving the page: ``GET /`` and ``GET /static/<name>``
    (HEAD too).  Files are read once, here."""
    assets = load_assets()
    index = assets[INDEX]

    async def page(request: Request) -> Response:
        return index.response(request)

    async def static(request: Request) -> Response:
        asset = assets.get(request.path_params["name"])
        if asset is None:
            return Response(_NOT_FOUND, status_code=404, media_type="application/json")
        return asset.response(request)

    return [
        Route("/", page, methods=["GET"], name="web_page"),
        Route("/static/{name:str}", static, methods=["GET"], name="web_static"),
    ]


__all__ = ["WebAsset", "load_assets", "web_routes"]
