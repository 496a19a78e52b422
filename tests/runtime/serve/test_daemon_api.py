"""The daemon's REST + SSE API end to end, in process, on a scripted model."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytestmark = pytest.mark.anyio


async def _wait_terminal(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            body: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if body["run"]["status"] in ("succeeded", "failed", "cancelled"):
                return body
            await anyio.sleep(0.02)


async def test_a_run_through_the_api_streams_its_events_and_is_stored(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=2)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        body = {"task": "add things", "agent": "solver", "scaling": {"rollouts": 3}}
        run_id = await daemon_kit.create_run(client, body)
        events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
        kinds = [kind for _, kind, _ in events]
        assert kinds[0] == "run_started"
        assert kinds[-1] == "run_finished"
        assert kinds.count("rollout_finished") == 3
        assert kinds.count("step") == 3 * 3  # two tool steps and the answer, per rollout
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert events[-1][2]["answer"] == "42"

        detail = await _wait_terminal(client, run_id)
        assert detail["run"]["status"] == "succeeded"
        assert detail["run"]["answer"] == "42"
        assert detail["result"]["answer"] == "42"
        assert sorted(r["steps"] for r in detail["rollouts"]) == [3, 3, 3]
        assert detail["run"]["cost"]["model_calls"] == 9

        rollout = detail["rollouts"][0]["rollout_id"]
        trajectory = (await client.get(f"/v1/runs/{run_id}/rollouts/{rollout}")).json()
        assert [s["index"] for s in trajectory["steps"]] == [0, 1, 2]
        assert trajectory["stop_reason"] == "final answer"
        assert trajectory["steps"][0]["tool_results"][0]["content"] == "1"
        summaries = (await client.get(f"/v1/runs/{run_id}/summaries")).json()
        assert sorted(s["answer"] for s in summaries) == ["42", "42", "42"]

    with sqlite3.connect(tmp_path / "runs.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 9
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == len(events)
        assert conn.execute("SELECT model_calls FROM usage").fetchone()[0] == 9


async def test_reconnecting_with_last_event_id_misses_nothing(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    backend = daemon_kit.scripted(steps=3, latency_s=0.03)
    async with (
        daemon_kit.running(config, backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        body = {"task": "t", "agent": "solver", "scaling": {"rollouts": 2}}
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        first = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events", limit=4)
        assert len(first) == 4
        rest = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events", last_event_id=first[-1][0])
        whole = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
        assert [e[0] for e in first + rest] == [e[0] for e in whole]
        assert first + rest == whole
        by_query = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events?after=5")
        assert by_query == whole[5:]
        bad = await client.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 422
        assert bad.json()["where"] == "Last-Event-ID"


async def test_listing_pages_and_filters_runs(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        ids = []
        for i in range(5):
            response = await client.post("/v1/runs", json={"task": f"task {i}", "agent": "solver"})
            ids.append(response.json()["run_id"])
        for run_id in ids:
            await _wait_terminal(client, run_id)
        page1 = (await client.get("/v1/runs?limit=2")).json()
        page2 = (await client.get(f"/v1/runs?limit=2&cursor={page1['next_cursor']}")).json()
        page3 = (await client.get(f"/v1/runs?limit=2&cursor={page2['next_cursor']}")).json()
        listed = [r["run_id"] for p in (page1, page2, page3) for r in p["runs"]]
        assert listed == ids[::-1]
        assert page3["next_cursor"] is None
        done = (await client.get("/v1/runs?status=succeeded&limit=50")).json()["runs"]
        assert len(done) == 5
        assert (await client.get("/v1/runs?status=failed")).json()["runs"] == []
        bad = await client.get("/v1/runs?status=done")
        assert bad.status_code == 422
        assert bad.json()["where"] == "query.status"
        bad = await client.get("/v1/runs?cursor=zz")
        assert bad.status_code == 422
        assert bad.json()["where"] == "query.cursor"


async def test_cancelling_a_run_stops_it_and_ends_its_stream(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path)
    backend = daemon_kit.scripted(steps=50, latency_s=0.05)
    async with (
        daemon_kit.running(config, backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        run_id = (
            await client.post(
                "/v1/runs", json={"task": "long", "agent": "solver", "scaling": {"rollouts": 2}}
            )
        ).json()["run_id"]
        async with anyio.create_task_group() as tg:
            streamed: list[Any] = []

            async def follow() -> None:
                streamed.extend(await daemon_kit.sse(client, f"/v1/runs/{run_id}/events"))

            tg.start_soon(follow)
            await anyio.sleep(0.3)
            cancelled = await client.post(f"/v1/runs/{run_id}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        assert streamed[-1][1] == "run_finished"
        assert streamed[-1][2]["status"] == "cancelled"
        calls = len(backend.requests)
        await anyio.sleep(0.2)
        assert len(backend.requests) == calls  # nothing runs after the cancel
        assert (await client.post("/v1/runs/nope/cancel")).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "where"),
    [
        (b"{not json", 400, "body"),
        (b"", 400, "body"),
        (b"[]", 422, "body"),
        (b'{"agent": "solver"}', 422, "body"),
        (b'{"task": 3}', 422, "task"),
        (b'{"task": "x", "scaling": {"rollouts": 0}}', 422, "scaling.rollouts"),
        (b'{"task": "x", "scaling": {"rollouts": 1000}}', 422, "scaling.rollouts"),
        (b'{"task": "x", "scaling": {"aggregate": "nope"}}', 422, "scaling.aggregate.name"),
        (b'{"task": "x", "budget": {"max_tokens": -1}}', 422, "budget.max_tokens"),
        (b'{"task": "x", "budget": {"max_usd": 1e999}}', 422, "budget.max_usd"),
        (b'{"task": "x", "scaling": {"aggregate": 3}}', 422, "scaling.aggregate"),
        (b'{"task": "x", "scaling": {"options": ["g", 2]}}', 422, "scaling.options"),
        (b'{"task": "x", "scaling": "rtv"}', 422, "scaling"),
        (b'{"task": "x", "agent": "ghost"}', 404, "agent"),
        (b'{"task": "   "}', 422, "task"),
    ],
)
async def test_bad_requests_get_a_clear_error(
    tmp_path: Path, daemon_kit: Any, body: bytes, status: int, where: str
) -> None:
    async with (
        daemon_kit.running(daemon_kit.config(tmp_path)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        response = await client.post("/v1/runs", content=body)
        assert response.status_code == status, response.text
        error = response.json()
        assert error["where"] == where
        assert error["message"]
        assert error["status"] == status
        assert (await client.get("/v1/runs")).json()["runs"] == []  # nothing was created


async def test_unknown_paths_and_methods_answer_in_json(tmp_path: Path, daemon_kit: Any) -> None:
    async with (
        daemon_kit.running(daemon_kit.config(tmp_path)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        missing = await client.get("/v1/nothing")  # under /v1: OpenAI's shape
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        wrong = await client.delete("/v1/runs")
        assert wrong.status_code == 405
        assert wrong.json()["error"] == "method_not_allowed"
        assert (await client.get("/v1/runs/none")).status_code == 404
        agents = (await client.get("/v1/agents")).json()["agents"]
        assert {a["name"] for a in agents} == {"default", "solver"}
        assert {a["model"] for a in agents} == {"agentrt/default", "agentrt/solver"}
        doc = (await client.get("/openapi.json")).json()
        assert doc["openapi"].startswith("3.1")
        assert {"/v1/runs", "/v1/runs/{run_id}", "/v1/runs/{run_id}/events"} <= set(doc["paths"])
        assert "RunRequest" in doc["components"]["schemas"]


async def test_host_origin_and_token_are_checked(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(
        tmp_path, server={"token": "s3cret-token-0123456789", "allowed_origins": ["https://ok.io"]}
    )
    async with daemon_kit.running(config) as daemon, httpx.AsyncClient(base_url=daemon.url) as c:
        auth = {"Authorization": "Bearer s3cret-token-0123456789"}
        assert (await c.get("/v1/runs")).status_code == 401
        wrong = await c.get("/v1/runs", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["where"] == "Authorization"
        assert (await c.get("/v1/runs", headers=auth)).status_code == 200
        # The query token opens only the event stream (EventSource sends no headers).
        assert (await c.get("/v1/runs?access_token=s3cret-token-0123456789")).status_code == 401
        assert (await c.get("/healthz")).status_code == 200  # probes need no token
        assert (await c.get("/")).status_code == 200  # the page's files hold no data
        assert (await c.get("/v1/agents")).status_code == 401
        rebinding = await c.get("/v1/runs", headers={**auth, "Host": "evil.example:80"})
        assert rebinding.status_code == 421
        assert rebinding.json()["where"] == "Host"
        foreign = await c.get("/v1/runs", headers={**auth, "Origin": "https://evil.example"})
        assert foreign.status_code == 403
        assert foreign.json()["where"] == "Origin"
        allowed = await c.get("/v1/runs", headers={**auth, "Origin": "https://ok.io"})
        assert allowed.status_code == 200
        own = await c.get("/v1/runs", headers={**auth, "Origin": daemon.url})
        assert own.status_code == 200


async def test_health_and_readiness(tmp_path: Path, daemon_kit: Any) -> None:
    async with (
        daemon_kit.running(daemon_kit.config(tmp_path)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        assert (await client.get("/healthz")).json()["status"] == "ok"
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"


async def test_metrics_show_the_daemons_runs_and_queues(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(tmp_path)
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=2)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        body = {"task": "t", "agent": "solver", "scaling": {"rollouts": 2}}
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        await _wait_terminal(client, run_id)
        text = (await client.get("/metrics")).text
    assert 'agentrt_runs{status="succeeded"} 1.0' in text
    assert 'agentrt_mailbox_depth{actor="runs"} 0.0' in text
    assert 'agentrt_mailbox_depth{actor="store_writes"} 0.0' in text
    assert "agentrt_active_runs 0.0" in text


async def test_a_rollout_waiting_for_its_backend_is_queued(tmp_path: Path, daemon_kit: Any) -> None:
    """A backend that takes one rollout at a time: the run's other rollouts
    show ``queued`` (not ``running``) until their turn."""
    config = daemon_kit.config(tmp_path, concurrency={"scripted": 1}, early_stop=False)
    backend = daemon_kit.scripted(steps=3, latency_s=0.05)
    body = {"task": "count", "agent": "solver", "scaling": {"rollouts": 3}}
    async with (
        daemon_kit.running(config, backend) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as client,
    ):
        run_id = (await client.post("/v1/runs", json=body)).json()["run_id"]
        seen: set[tuple[str, ...]] = set()
        with anyio.fail_after(20):
            while True:
                detail = (await client.get(f"/v1/runs/{run_id}")).json()
                statuses = tuple(sorted(r["status"] for r in detail["rollouts"]))
                seen.add(statuses)
                if detail["run"]["status"] in ("succeeded", "failed"):
                    break
                await anyio.sleep(0.01)
        events = await daemon_kit.sse(client, f"/v1/runs/{run_id}/events")
    assert detail["run"]["status"] == "succeeded"
    assert ("queued", "queued", "running") in seen
    assert sum(kind == "rollout_queued" for _, kind, _ in events) == 2
