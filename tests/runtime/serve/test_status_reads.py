"""``GET /v1/runs/{run_id}`` is answered before the app's routing
(``status_reads``): the same body, status and errors as the app's routes
would give, and every other request goes on to the app."""

from __future__ import annotations

from typing import cast

import httpx
import msgspec
import pytest
from starlette.types import Receive, Scope, Send

from agentrt.protocols._api import RunDetail, RunInfo
from agentrt.protocols._run import RunRequest
from agentrt.runtime.serve._app import status_reads
from agentrt.runtime.serve._bridge import RunService
from agentrt.runtime.serve._keys import CALLER, Caller
from agentrt.runtime.serve.store._run_store import StoreError

pytestmark = pytest.mark.anyio

DETAIL = RunDetail(
    run=RunInfo(
        run_id="r1", status="running", agent="solver", task="add", created_at=1.0, updated_at=2.0
    ),
    request=RunRequest(task="add", agent="solver"),
)


class _Runs:
    """The one read ``status_reads`` makes of the run service."""

    def __init__(self, answer: RunDetail | BaseException | None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def detail(self, run_id: str) -> RunDetail | None:
        self.asked.append(run_id)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def _get(
    answer: RunDetail | BaseException | None,
    method: str,
    path: str,
    scope_extra: Caller | None = None,
) -> tuple[httpx.Response, list[str], list[str]]:
    """``method path`` through ``status_reads``: the response, the run ids
    read and the paths that reached the app behind it."""
    runs = _Runs(answer)
    behind: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        behind.append(scope["path"])
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    served = status_reads(app, cast(RunService, runs))

    async def with_caller(scope: Scope, receive: Receive, send: Send) -> None:
        if scope_extra is not None:
            scope[CALLER] = scope_extra
        await served(scope, receive, send)

    transport = httpx.ASGITransport(app=with_caller)
    async with httpx.AsyncClient(transport=transport, base_url="http://daemon") as client:
        response = await client.request(method, path)
    return response, runs.asked, behind


async def test_a_status_read_is_the_run_detail_encoded_once() -> None:
    response, asked, behind = await _get(DETAIL, "GET", "/v1/runs/r1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == msgspec.json.encode(DETAIL)
    assert (asked, behind) == (["r1"], [])


async def test_an_unknown_run_is_the_apis_404() -> None:
    response, asked, _ = await _get(None, "GET", "/v1/runs/nope")
    assert asked == ["nope"]
    assert response.status_code == 404
    assert response.json()["where"] == "run_id"
    assert response.json()["error"] == "not_found"


async def test_a_run_another_key_owns_reads_as_no_such_run() -> None:
    other = Caller("other", scopes=frozenset({"runs:read"}))
    response, _, _ = await _get(DETAIL, "GET", "/v1/runs/r1", scope_extra=other)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


async def test_a_read_that_crashes_is_a_json_500_and_a_full_store_507() -> None:
    response, _, _ = await _get(RuntimeError("boom"), "GET", "/v1/runs/r1")
    assert response.status_code == 500
    assert response.json()["error"] == "internal"
    assert "boom" in response.json()["message"]
    full = StoreError("disk full", store="runs.db", operation="reading", full=True)
    response, _, _ = await _get(full, "GET", "/v1/runs/r1")
    assert response.status_code == 507
    assert "retry-after" in response.headers


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/runs/r1"),
        ("HEAD", "/v1/runs/r1"),
        ("GET", "/v1/runs/r1/events"),
        ("GET", "/v1/runs"),
        ("GET", "/v1/runs/"),
    ],
)
async def test_every_other_request_goes_on_to_the_app(method: str, path: str) -> None:
    response, asked, behind = await _get(DETAIL, method, path)
    assert response.status_code == 418
    assert (asked, behind) == ([], [path])
