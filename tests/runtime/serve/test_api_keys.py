"""API keys (issue 27, item 4): names, scopes, ownership of runs and
threads, per-key limits, the single token as an admin key, and keys kept out
of logs and configuration errors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.client import AsyncClient, NotFound
from agentrt.protocols import RunRequest
from agentrt.runtime.config._config_file import config_from_mapping, load_config
from agentrt.runtime.config._daemon_config import ServerConfig
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve._keys import Caller, KeyRing, digest, new_key
from agentrt.runtime.serve.store._run_store import RunStore

pytestmark = pytest.mark.process

TOKEN = "shared-token-0123456789"
ALICE, BOB, AUDITOR, TIGHT, ONE = (new_key()[0] for _ in range(5))


def _key(key: str, *scopes: str, **limits: int) -> dict[str, Any]:
    return {"sha256": digest(key), "scopes": list(scopes), **limits}


def _keys() -> dict[str, Any]:
    return {
        "alice": _key(ALICE, "runs:create", "runs:read"),
        "bob": _key(BOB, "runs:create", "runs:read"),
        "auditor": _key(AUDITOR, "runs:read_all"),
        "tight": _key(TIGHT, "runs:read", rate_per_minute=3),
        "one": _key(ONE, "runs:create", "runs:read", max_active_runs=1),
    }


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.anyio
async def test_a_key_cannot_read_follow_or_cancel_another_keys_run(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path, server={"token": TOKEN, "keys": _keys()})
    slow = daemon_kit.scripted(steps=200, latency_s=0.05)  # running while we look
    async with (
        daemon_kit.running(config, slow) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as c,
    ):
        created = await c.post("/v1/runs", json={"task": "alice's"}, headers=_as(ALICE))
        assert created.status_code == 201
        run_id = created.json()["run_id"]
        assert created.json()["owner"] == "alice"
        for method, path in (
            ("GET", f"/v1/runs/{run_id}"),
            ("GET", f"/v1/runs/{run_id}/events"),
            ("GET", f"/v1/runs/{run_id}/summaries"),
            ("GET", f"/v1/runs/{run_id}/rollouts/r0"),
            ("POST", f"/v1/runs/{run_id}/cancel"),
        ):
            refused = await c.request(method, path, headers=_as(BOB))
            # 404, as for no such run: bob learns nothing of alice's runs.
            assert refused.status_code == 404, (path, refused.text)
            assert refused.json()["where"] in ("run_id", "rollout_id")
        assert (await c.get(f"/v1/runs/{run_id}/events?access_token={BOB}")).status_code == 404
        assert (await c.get("/v1/runs", headers=_as(BOB))).json()["runs"] == []
        # The client library, with a key as its token, sees the same.
        async with AsyncClient(daemon.url, token=BOB) as bob:
            with pytest.raises(NotFound):
                await bob.get_run(run_id)
            with pytest.raises(NotFound):
                await bob.cancel_run(run_id)
        # Its owner, a read-all key and the shared token (an admin key) see it.
        for key in (ALICE, AUDITOR, TOKEN):
            seen = await c.get(f"/v1/runs/{run_id}", headers=_as(key))
            assert seen.status_code == 200
            listed = await c.get("/v1/runs", headers=_as(key))
            assert [r["run_id"] for r in listed.json()["runs"]] == [run_id]
        # A read-only key may not cancel, even what it may read (403 naming the scope).
        cannot = await c.post(f"/v1/runs/{run_id}/cancel", headers=_as(AUDITOR))
        assert cannot.status_code == 403
        assert cannot.json()["where"] == "server.keys.auditor.scopes"
        assert "runs:create" in cannot.json()["message"]
        # Bob's own run is his; alice's listing does not show it.
        mine = await c.post("/v1/runs", json={"task": "bob's"}, headers=_as(BOB))
        assert mine.json()["owner"] == "bob"
        alice_list = (await c.get("/v1/runs", headers=_as(ALICE))).json()["runs"]
        assert [r["run_id"] for r in alice_list] == [run_id]
        # Threads: the same ownership.
        thread = await c.post("/v1/threads", json={}, headers=_as(ALICE))
        thread_id = thread.json()["thread_id"]
        assert (await c.get(f"/v1/threads/{thread_id}", headers=_as(BOB))).status_code == 404
        in_thread = await c.post(
            f"/v1/threads/{thread_id}/runs", json={"task": "x"}, headers=_as(BOB)
        )
        assert in_thread.status_code == 404
        assert (await c.delete(f"/v1/threads/{thread_id}", headers=_as(BOB))).status_code == 404
        assert (await c.get("/v1/threads", headers=_as(BOB))).json()["threads"] == []
        assert (await c.get(f"/v1/threads/{thread_id}", headers=_as(ALICE))).status_code == 200
        # Admin-only paths.
        assert (await c.get("/v1/mcp/authorizations", headers=_as(ALICE))).status_code == 403
        assert (await c.get("/v1/mcp/authorizations", headers=_as(TOKEN))).status_code == 200
        assert (await c.get("/v1/models", headers=_as(ALICE))).status_code == 200
        # The OpenAI routes need no more than runs:create (their ownership: below).
        responses = await c.post("/v1/responses", json={}, headers=_as(ALICE))
        assert responses.status_code == 400, responses.text
        refused = await c.post("/v1/responses", json={}, headers=_as(AUDITOR))
        assert refused.status_code == 403
        assert "runs:create" in refused.json()["message"]
        # The owner cancels its own run.
        cancelled = await c.post(f"/v1/runs/{run_id}/cancel", headers=_as(ALICE))
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled"
        await c.post(f"/v1/runs/{mine.json()['run_id']}/cancel", headers=_as(BOB))


@pytest.mark.anyio
async def test_each_key_has_its_own_limits(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(tmp_path, server={"keys": _keys()})
    slow = daemon_kit.scripted(steps=200, latency_s=0.05)
    async with (
        daemon_kit.running(config, slow) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as c,
    ):
        # rate_per_minute = 3: the fourth request at once is refused, naming the limit.
        for _ in range(3):
            assert (await c.get("/v1/runs", headers=_as(TIGHT))).status_code == 200
        limited = await c.get("/v1/runs", headers=_as(TIGHT))
        assert limited.status_code == 429
        assert limited.json()["where"] == "server.keys.tight.rate_per_minute"
        assert "'tight'" in limited.json()["message"]
        assert int(limited.headers["retry-after"]) >= 1
        assert (await c.get("/v1/runs", headers=_as(ALICE))).status_code == 200  # not alice's
        # max_active_runs = 1: a second unfinished run of the key is refused.
        first = await c.post("/v1/runs", json={"task": "a"}, headers=_as(ONE))
        assert first.status_code == 201
        second = await c.post("/v1/runs", json={"task": "b"}, headers=_as(ONE))
        assert second.status_code == 429
        assert second.json()["where"] == "server.keys.one.max_active_runs"
        assert "'one'" in second.json()["message"]
        assert "retry-after" in second.headers
        other = await c.post("/v1/runs", json={"task": "c"}, headers=_as(ALICE))
        assert other.status_code == 201  # another key's runs do not count
        await c.post(f"/v1/runs/{first.json()['run_id']}/cancel", headers=_as(ONE))
        again = await c.post("/v1/runs", json={"task": "d"}, headers=_as(ONE))
        assert again.status_code == 201  # the cancelled run freed the key's slot
        for run in (other.json(), again.json()):
            key = ALICE if run["owner"] == "alice" else ONE
            await c.post(f"/v1/runs/{run['run_id']}/cancel", headers=_as(key))


def test_a_keys_rate_refills_with_time() -> None:
    now = [0.0]
    server = ServerConfig(keys={"k": _key(ALICE, "runs:read", rate_per_minute=2)})
    ring = KeyRing(server, token=None, clock=lambda: now[0])
    caller = ring.identify(ALICE)
    assert caller == Caller("k", frozenset({"runs:read"}))
    ring.admit(caller)
    ring.admit(caller)
    with pytest.raises(ApiProblem) as refused:
        ring.admit(caller)
    assert refused.value.retry_after == 30  # one request per 30 s
    now[0] = 30.0
    ring.admit(caller)
    assert ring.identify(BOB) is None
    assert ring.identify(digest(ALICE)) is None  # the digest is not a key


def test_unknown_scope_and_pasted_key_are_errors_naming_where(tmp_path: Path) -> None:
    toml = tmp_path / "agentrt.toml"
    toml.write_text(
        f'[server.keys.ci]\nsha256 = "{digest(ALICE)}"\nscopes = ["runs:create", "runs:write"]\n'
    )
    with pytest.raises(ConfigError) as bad_scope:
        load_config(toml)
    text = str(bad_scope.value)
    assert "agentrt.toml:3" in text
    assert "server.keys.ci.scopes" in text
    assert "unknown scope 'runs:write'" in text
    toml.write_text(f'[server.keys.ci]\nsha256 = "{ALICE}"\nscopes = ["runs:read"]\n')
    with pytest.raises(ConfigError) as pasted:
        load_config(toml)
    assert "server.keys.ci.sha256" in str(pasted.value)
    assert ALICE not in str(pasted.value)  # the key is not echoed back
    with pytest.raises(ConfigError, match="the same sha256"):
        config_from_mapping(
            {"server": {"keys": {"a": _key(ALICE, "admin"), "b": _key(ALICE, "admin")}}},
            source="test",
        )


@pytest.mark.slow
def test_key_command_and_keys_stay_out_of_logs(tmp_path: Path, daemon_kit: Any) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "agentrt", "key", "ci", "--scope", "runs:create"],
        capture_output=True,
        text=True,
        check=True,
    )
    key = made.stderr.strip().rsplit(" ", 1)[-1]
    assert key.startswith("agentrt_")
    assert key not in made.stdout  # stdout is the table only: safe to append to the file
    assert f'sha256 = "{digest(key)}"' in made.stdout
    port = daemon_kit.free_port()
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f'log_level = "DEBUG"\n{daemon_kit.scripted_toml}\n[server]\nport = {port}\n{made.stdout}'
    )
    log = tmp_path / "daemon.log"
    proc = daemon_kit.start_serve(config, port, log)
    try:
        url = f"http://127.0.0.1:{port}"
        run = httpx.post(f"{url}/v1/runs", json={"task": "hi"}, headers=_as(key), timeout=10)
        assert run.status_code == 201
        assert run.json()["owner"] == "ci"
        assert httpx.get(f"{url}/v1/runs", headers=_as(key + "x"), timeout=10).status_code == 401
        events = f"{url}/v1/runs/{run.json()['run_id']}/events?access_token={key}"
        assert httpx.get(events, timeout=10).status_code == 403  # the key lacks runs:read
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "run_submitted" in text  # the log was written
    assert key not in text


@pytest.mark.anyio
async def test_a_store_file_from_before_keys_gives_its_runs_to_the_shared_token(
    tmp_path: Path,
) -> None:
    """An older store has no ``owner`` columns: opening it adds them, and its
    runs and threads are the shared token's (``owner`` ``None``)."""
    db = tmp_path / "old.db"
    async with RunStore(db) as store:
        await store.create_run("run-1", RunRequest(task="t"))
        await store.create_thread("thread-1", {})
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN owner")
        conn.execute("ALTER TABLE threads DROP COLUMN owner")
    async with RunStore(db) as store:
        info = await store.run_info("run-1")
        assert info is not None
        assert info.owner is None
        await store.create_run("run-2", RunRequest(task="t"), owner="alice")
        mine = await store.list_runs(status=None, limit=10, cursor=None, owner="alice")
        assert [r.run_id for r in mine.runs] == ["run-2"]
        shared = await store.list_runs(status=None, limit=10, cursor=None, owner=None)
        assert [r.run_id for r in shared.runs] == ["run-1"]
        every = await store.list_runs(status=None, limit=10, cursor=None)
        assert [r.run_id for r in every.runs] == ["run-2", "run-1"]
        assert [t.thread_id for t in await store.list_threads(limit=10, owner=None)] == ["thread-1"]
        assert await store.list_threads(limit=10, owner="alice") == []


@pytest.mark.anyio
async def test_responses_and_conversations_belong_to_their_key(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(tmp_path, server={"token": TOKEN, "keys": _keys()})
    async with (
        daemon_kit.running(config, daemon_kit.scripted(steps=0)) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=30) as c,
    ):
        made = await c.post("/v1/conversations", json={}, headers=_as(ALICE))
        conversation = made.json()["id"]
        first = await c.post(
            "/v1/responses",
            json={"model": "agentrt/solver", "input": "hi", "conversation": conversation},
            headers=_as(ALICE),
        )
        assert first.status_code == 200, first.text
        response_id = first.json()["id"]
        for key in (BOB, AUDITOR):  # another key; a read-all key sees, but cannot create
            seen = await c.get(f"/v1/conversations/{conversation}", headers=_as(key))
            assert seen.status_code == (404 if key == BOB else 200), seen.text
        for body, param in (
            ({"previous_response_id": response_id}, "previous_response_id"),
            ({"conversation": conversation}, "conversation"),
        ):
            asked = {"model": "agentrt/solver", "input": "and then?", **body}
            refused = await c.post("/v1/responses", json=asked, headers=_as(BOB))
            assert refused.status_code == 404, refused.text
            assert refused.json()["error"]["param"] == param
            mine = await c.post("/v1/responses", json=asked, headers=_as(ALICE))
            assert mine.status_code == 200, mine.text
        gone = await c.delete(f"/v1/conversations/{conversation}", headers=_as(BOB))
        assert gone.status_code == 404
        kept = await c.get(f"/v1/conversations/{conversation}", headers=_as(ALICE))
        assert kept.status_code == 200
