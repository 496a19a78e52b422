"""The web page's routes without a browser: what ``web_routes`` serves, its
headers and caching, and that every file the page references is there."""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from agentrt.runtime.serve._web import load_assets, web_routes


@pytest.fixture
def client() -> TestClient:
    return TestClient(Starlette(routes=web_routes()))


def test_page_and_assets_are_served_with_their_types(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert 'data-testid="view"' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "connect-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    script = client.get("/static/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert client.get("/static/style.css").headers["content-type"] == "text/css; charset=utf-8"


def test_conditional_get_and_unknown_files(client: TestClient) -> None:
    first = client.get("/static/run.js")
    etag = first.headers["etag"]
    again = client.get("/static/run.js", headers={"If-None-Match": f'W/"x", {etag}'})
    assert (again.status_code, again.content) == (304, b"")
    assert client.get("/static/run.js", headers={"If-None-Match": '"other"'}).status_code == 200
    missing = client.get("/static/nope.js")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    assert client.get("/static/..%2Fweb.py").status_code == 404


def test_every_referenced_file_exists_and_nothing_is_fetched_from_elsewhere() -> None:
    assets = load_assets()
    referenced: set[str] = set()
    for name, asset in assets.items():
        text = asset.body.decode()
        referenced |= set(re.findall(r"""(?:src|href)="/static/([\w.-]+)\"""", text))
        referenced |= set(re.findall(r"""from '\./([\w.-]+)'""", text))
        # Offline: no absolute URLs to other hosts in any file.
        assert not re.search(r"""(?:src|href|from|url\()\s*=?\s*['"]?(?:https?:)?//""", text), name
    assert referenced >= {"app.js", "style.css", "api.js", "run.js", "dom.js"}
    assert referenced <= set(assets), sorted(referenced - set(assets))
