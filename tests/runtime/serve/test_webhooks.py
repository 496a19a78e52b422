"""Run webhooks end to end: a daemon in process posts to a loopback
receiver, which fails twice and then takes the delivery; the signature
checks out with ``agentrt.client.verify_webhook``; the run store records
each try; a receiver that hangs holds up no run; a URL that is not http(s)
is refused naming the field; the secret never reaches the logs."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt import ConfigError
from agentrt.client import AsyncClient, RequestRefused, WebhookRejected, verify_webhook
from agentrt.protocols import RunFinished, RunRequest

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-0123456789abcdef"


@dataclass
class Receiver:
    """A loopback HTTP receiver: answers ``fail`` requests with 500, then
    200; keeps each request's headers and body.  ``hold``: while set, requests
    wait (a receiver that hangs)."""

    url: str
    fail: int
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@contextmanager
def receiver(fail: int, *, hang: bool = False) -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = state["r"]
            body = self.rfile.read(int(self.headers["content-length"]))
            rec.requests.append((dict(self.headers.items()), body))
            if hang:
                rec.release.wait(30)
            status = 500 if len(rec.requests) <= rec.fail else 200
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    state["r"] = Receiver(url=f"http://127.0.0.1:{port}/hooks/agentrt", fail=fail)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["r"]
    finally:
        state["r"].release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _deliveries(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT body FROM webhook_deliveries ORDER BY rowid").fetchall()
    return [json.loads(body) for (body,) in rows]


async def _until_delivery(db: Path, status: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            found = [d for d in _deliveries(db) if d["status"] == status]
            if found:
                return found[0]
            await anyio.sleep(0.02)


def _config(daemon_kit: Any, tmp_path: Path, **webhook: Any) -> Any:
    settings = {"secret": SECRET, "backoff_s": 0.01, "timeout_s": 5, **webhook}
    return daemon_kit.config(tmp_path, server={"webhook": settings})


async def test_a_failing_receiver_gets_the_signed_delivery_on_the_third_try(
    tmp_path: Path, daemon_kit: Any, capsys: pytest.CaptureFixture[str], caplog: Any
) -> None:
    with receiver(fail=2) as rec:
        config = _config(daemon_kit, tmp_path)
        async with (
            daemon_kit.running(config, daemon_kit.scripted(steps=1)) as daemon,
            AsyncClient(daemon.url) as client,
        ):
            run = await client.create_run(RunRequest(task="t", agent="solver", webhook=rec.url))
            delivery = await _until_delivery(tmp_path / "runs.db", "delivered")
            detail = await client.get_run(run.run_id)
    assert delivery["run_id"] == run.run_id
    assert delivery["attempts"] == 3
    assert delivery["last_status"] == 200
    assert delivery["kind"] == "run.succeeded"
    assert delivery["url"] == rec.url
    assert len(rec.requests) == 3
    ids = {headers["X-Agentrt-Delivery"] for headers, _ in rec.requests}
    assert ids == {delivery["delivery_id"]}  # one delivery, tried three times

    headers, body = rec.requests[-1]
    # The signature, checked by hand: HMAC-SHA256 of "timestamp.body".
    stamp = headers["X-Agentrt-Timestamp"]
    expected = hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    assert headers["X-Agentrt-Signature"] == "v1=" + expected.hexdigest()
    event = verify_webhook(body, headers, SECRET)
    assert event.kind == "run.succeeded"
    assert event.run.run_id == run.run_id
    assert event.run.answer == "42"
    assert event.run == detail.run

    with pytest.raises(WebhookRejected) as wrong:
        verify_webhook(body, headers, "another-secret-0123456789")
    assert wrong.value.where == "X-Agentrt-Signature"
    with pytest.raises(WebhookRejected):
        verify_webhook(body.replace(b"42", b"43"), headers, SECRET)
    with pytest.raises(WebhookRejected) as replayed:
        verify_webhook(body, headers, SECRET, now=int(stamp) + 3600)
    assert replayed.value.where == "X-Agentrt-Timestamp"

    logged = capsys.readouterr()
    assert "webhook_attempt_failed" in logged.out + logged.err + caplog.text
    assert SECRET not in logged.out + logged.err + caplog.text
    assert SECRET not in repr(config)


async def test_a_hanging_receiver_holds_up_no_run(tmp_path: Path, daemon_kit: Any) -> None:
    with receiver(fail=0, hang=True) as rec:
        config = _config(daemon_kit, tmp_path, url=rec.url, senders=1, queue=1, timeout_s=60)
        async with (
            daemon_kit.running(config, daemon_kit.scripted(steps=1)) as daemon,
            AsyncClient(daemon.url) as client,
        ):
            first = await client.create_run("t")
            async with client.follow(first.run_id) as events:
                [e async for e in events]
            with anyio.fail_after(20):
                while True:  # until the one sender waits on the receiver (a thread)
                    if rec.requests:
                        break
                    await anyio.sleep(0.02)
            # Two more runs end while it hangs: one queued, one dropped.
            for _ in range(2):
                async with client.create_and_follow("t") as events:
                    last = [e async for e in events][-1]
                assert isinstance(last, RunFinished)
                assert last.status == "succeeded"
            statuses = sorted(d["status"] for d in _deliveries(tmp_path / "runs.db"))
            assert statuses == ["dropped", "pending", "pending"]
            assert (await client.list_runs(status="succeeded")).runs.__len__() == 3
            rec.release.set()
            delivered = await _until_delivery(tmp_path / "runs.db", "delivered")
            assert delivered["run_id"] == first.run_id


async def test_a_webhook_that_is_not_http_is_refused_naming_the_field(
    tmp_path: Path, daemon_kit: Any
) -> None:
    async with (
        daemon_kit.running(_config(daemon_kit, tmp_path)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as http,
    ):
        for url in ("ftp://example.com/hook", "file:///etc/passwd", "example.com", ""):
            response = await http.post("/v1/runs", json={"task": "t", "webhook": url})
            assert response.status_code == 400, response.text
            assert response.json()["where"] == "webhook"
            assert "http" in response.json()["message"]
        async with AsyncClient(daemon.url) as client:
            with pytest.raises(RequestRefused) as refused:
                await client.create_run(RunRequest(task="t", webhook="gopher://x"))
            assert refused.value.where == "webhook"


async def test_a_daemon_without_a_secret_takes_no_webhook(tmp_path: Path, daemon_kit: Any) -> None:
    async with (
        daemon_kit.running(daemon_kit.config(tmp_path)) as daemon,
        httpx.AsyncClient(base_url=daemon.url) as http,
    ):
        response = await http.post(
            "/v1/runs", json={"task": "t", "webhook": "http://127.0.0.1:9/hook"}
        )
        assert response.status_code == 400
        assert response.json()["where"] == "webhook"
        assert "secret" in response.json()["message"]
        document = (await http.get("/openapi.json")).json()
        schema = document["components"]["schemas"]["RunRequestBody"]["properties"]["webhook"]
        assert schema["type"] == "null"


async def test_a_delivery_pending_at_shutdown_is_tried_again_on_the_next_start(
    tmp_path: Path, daemon_kit: Any
) -> None:
    db = tmp_path / "runs.db"
    with receiver(fail=1) as rec:
        # A long wait after the failed first try: the daemon stops during it.
        waiting = _config(daemon_kit, tmp_path, url=rec.url, backoff_s=600)
        async with (
            daemon_kit.running(waiting, daemon_kit.scripted(steps=1)) as daemon,
            AsyncClient(daemon.url) as client,
        ):
            run = await client.create_run("t")
            with anyio.fail_after(20):
                while True:
                    found = _deliveries(db)
                    if found and found[0]["attempts"] == 1:
                        break
                    await anyio.sleep(0.02)
        assert [(d["status"], d["attempts"], d["last_status"]) for d in _deliveries(db)] == [
            ("pending", 1, 500)
        ]
        async with daemon_kit.running(_config(daemon_kit, tmp_path, url=rec.url)):
            delivered = await _until_delivery(db, "delivered")
    assert delivered["run_id"] == run.run_id
    assert delivered["attempts"] == 2  # the second try, counted on from the first daemon
    assert len(rec.requests) == 2
    event = verify_webhook(rec.requests[-1][1], rec.requests[-1][0], SECRET)
    assert event.run.status == "succeeded"


def test_a_configured_webhook_needs_a_secret_and_hides_it(tmp_path: Path, daemon_kit: Any) -> None:
    with pytest.raises(ConfigError) as missing:
        daemon_kit.config(tmp_path, server={"webhook": {"url": "https://hooks.example/x"}})
    assert "server.webhook" in str(missing.value)
    assert "secret" in str(missing.value)
    with pytest.raises(ConfigError) as not_http:
        daemon_kit.config(
            tmp_path, server={"webhook": {"url": "ftp://hooks.example/x", "secret": SECRET}}
        )
    assert "server.webhook.url" in str(not_http.value)
    config = _config(daemon_kit, tmp_path, url="https://hooks.example/x")
    assert SECRET not in repr(config) + str(config)
