"""The daemon under abuse: every ``[server]`` limit, when hit, gets a clear
4xx naming its key; nothing admitted is lost.  Connection governance
(header/body deadlines, connection cap, sizes, JSON depth), admission
(429 + ``Retry-After``, the run queue in /metrics), origins and tokens."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.runtime.serve._api_problem import ApiProblem
from agentrt.runtime.serve._governance import check_json_depth

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-0123456789"


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_json_depth_is_measured_outside_strings() -> None:
    check_json_depth(json.dumps({"a": _deep(500)}).encode(), 4)  # brackets in a string
    check_json_depth(json.dumps([[1, 2]] * 10_000).encode(), 2)  # wide, not deep
    check_json_depth(_deep(64).encode(), 64)
    with pytest.raises(ApiProblem) as caught:
        check_json_depth(_deep(65).encode(), 64)
    assert caught.value.status == 400
    assert caught.value.where == "server.max_json_depth"
    escaped = json.dumps({"s": 'a "quoted" [[[[', "x": [[[[[1]]]]]}).encode()
    with pytest.raises(ApiProblem):
        check_json_depth(escaped, 5)
    check_json_depth(escaped, 6)


def _raw(port: int, data: bytes, *, wait_s: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until it is closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _status_and_body(raw: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), json.loads(body), headers


async def test_request_limits_answer_4xx_naming_the_key(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(
        tmp_path,
        server={
            "max_request_bytes": 2048,
            "max_header_bytes": 2048,
            "max_json_depth": 16,
            "header_timeout_s": 0.5,
            "body_timeout_s": 0.5,
        },
    )
    async with daemon_kit.running(config) as endpoint:
        port = endpoint.port
        async with httpx.AsyncClient(base_url=endpoint.url) as client:
            # Deep JSON: 400 naming the limit, and the connection stays usable.
            deep = '{"task": "x", "metadata": {"a": ' + _deep(40) + "}}"
            response = await client.post("/v1/runs", content=deep)
            assert response.status_code == 400, response.text
            assert response.json()["where"] == "server.max_json_depth"
            assert (await client.get("/healthz")).status_code == 200
            response = await client.post(
                "/v1/chat/completions",
                content='{"model": "solver", "messages": ' + _deep(40) + "}",
            )
            assert response.status_code == 400, response.text
            assert "server.max_json_depth" in response.text
            response = await client.post(
                "/v1/responses", content='{"model": "solver", "input": ' + _deep(20) + "}"
            )
            assert response.status_code == 400, response.text
            assert "server.max_json_depth" in response.text
            # A declared body too large: refused before it is read.
            response = await client.post(
                "/v1/runs", content=b"{" + b" " * 4000 + b"}", headers={"content-type": "x"}
            )
            assert response.status_code == 413
            assert response.json()["where"] == "server.max_request_bytes"

        # A chunked body (no Content-Length) past the limit: refused while read.
        chunked = (
            b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"bb8\r\n"
            + b" " * 3000
            + b"\r\n"
        )
        status, body, _ = _status_and_body(await anyio.to_thread.run_sync(_raw, port, chunked))
        assert (status, body["where"]) == (413, "server.max_request_bytes")

        # Headers too large: 431.
        big = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 4000 + b"\r\n\r\n"
        status, body, _ = _status_and_body(await anyio.to_thread.run_sync(_raw, port, big))
        assert (status, body["where"]) == (431, "server.max_header_bytes")
        # ... and while they arrive, unfinished: 431 (not the 408 of their deadline).
        endless = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 4000
        status, body, _ = _status_and_body(await anyio.to_thread.run_sync(_raw, port, endless))
        assert (status, body["where"]) == (431, "server.max_header_bytes")
        # Headers never finished: 408 after header_timeout_s, then closed (the
        # read ends: ``_raw``'s 5 s socket timeout is the hang guard).
        started = time.monotonic()
        half = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        status, body, _ = _status_and_body(await anyio.to_thread.run_sync(_raw, port, half))
        assert (status, body["where"]) == (408, "server.header_timeout_s")
        # Not before the deadline (a lower bound: a loaded machine only adds to it).
        assert time.monotonic() - started > 0.4
        # A body that stops coming: 408 after body_timeout_s.
        partial = (
            b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n"
            b"Content-Type: application/json\r\n\r\n{"
        )
        raw = await anyio.to_thread.run_sync(_raw, port, partial)
        status, body, _ = _status_and_body(raw)
        assert (status, body["where"]) == (408, "server.body_timeout_s")


async def test_the_connection_cap_refuses_with_429(tmp_path: Path, daemon_kit: Any) -> None:
    config = daemon_kit.config(tmp_path, server={"max_connections": 4, "header_timeout_s": 5})
    async with daemon_kit.running(config) as endpoint:
        held = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(4)]
        try:
            await anyio.sleep(0.2)
            raw = await anyio.to_thread.run_sync(
                _raw, endpoint.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            )
            status, body, headers = _status_and_body(raw)
            assert (status, body["where"]) == (429, "server.max_connections")
            assert headers["retry-after"] == "1"
        finally:
            for sock in held:
                sock.close()
        await anyio.sleep(0.2)
        async with httpx.AsyncClient(base_url=endpoint.url) as client:
            assert (await client.get("/healthz")).status_code == 200
            metrics = (await client.get("/metrics")).text
        assert 'agentrt_limit_refusals_total{limit="server.max_connections"} 1.0' in metrics


async def test_admission_limit_answers_429_and_metrics_show_the_queue(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(
        tmp_path, server={"max_active_runs": 1, "max_pending_runs": 1, "shutdown_grace_s": 0}
    )
    slow = daemon_kit.scripted(steps=1, latency_s=30.0)
    async with (
        daemon_kit.running(config, slow) as endpoint,
        httpx.AsyncClient(base_url=endpoint.url, timeout=10) as client,
    ):
        admitted = []
        for _ in range(2):
            response = await client.post("/v1/runs", json={"task": "t"})
            assert response.status_code == 201, response.text
            admitted.append(response.json()["run_id"])
        refused = await client.post("/v1/runs", json={"task": "t"})
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["where"] == "server.max_pending_runs"
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "solver", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert chat.status_code == 429, chat.text
        assert chat.headers["retry-after"] == "1"
        assert "server.max_pending_runs" in chat.text
        metrics = (await client.get("/metrics")).text
        assert 'agentrt_run_queue{state="running"} 1.0' in metrics
        assert 'agentrt_run_queue{state="pending"} 1.0' in metrics
        assert "agentrt_run_queue_limit 2.0" in metrics
        # Nothing admitted was lost: both runs are still there, unfinished.
        for run_id in admitted:
            detail = (await client.get(f"/v1/runs/{run_id}")).json()
            assert detail["run"]["status"] in ("pending", "running")
        # A freed slot admits again.
        assert (await client.post(f"/v1/runs/{admitted[1]}/cancel")).status_code == 200
        with anyio.fail_after(10):
            while (await client.post("/v1/runs", json={"task": "t"})).status_code != 201:  # noqa: ASYNC110 - polling the daemon
                await anyio.sleep(0.05)


async def test_origins_are_exact_and_the_query_token_only_opens_the_event_stream(
    tmp_path: Path, daemon_kit: Any
) -> None:
    config = daemon_kit.config(
        tmp_path,
        server={
            "token": TOKEN,
            "allowed_origins": ["https://console.example.com"],
            "body_timeout_s": 3600,
        },
    )
    async with (
        daemon_kit.running(config) as endpoint,
        httpx.AsyncClient(base_url=endpoint.url) as client,
    ):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        port = endpoint.port
        for foreign in ("http://localhost", "http://127.0.0.1", "http://[::1]", "null"):
            response = await client.get("/v1/runs", headers={**auth, "Origin": foreign})
            assert response.status_code == 403, foreign
        for own in (
            f"http://127.0.0.1:{port}",
            f"http://localhost:{port}",
            "https://console.example.com",
            "https://console.example.com:443",
        ):
            response = await client.get("/v1/runs", headers={**auth, "Origin": own})
            assert response.status_code == 200, own
        assert (await client.get(f"/v1/runs?access_token={TOKEN}")).status_code == 401
        run_id = (await client.post("/v1/runs", json={"task": "t"}, headers=auth)).json()["run_id"]
        events = await client.get(f"/v1/runs/{run_id}/events?access_token={TOKEN}")
        assert events.status_code == 200
        assert (await client.get(f"/v1/runs/{run_id}/events")).status_code == 401
        # Authentication comes before the body: a huge declared body without
        # the token is refused, none of it sent.  Waiting for the body first
        # would wait out the body deadline (an hour here): no answer within
        # ``_raw``'s 5 s socket timeout, and no 401.
        head = (
            f"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000000\r\n\r\n"
        ).encode()
        status, body, _ = _status_and_body(await anyio.to_thread.run_sync(_raw, port, head))
        assert (status, body["where"]) == (401, "Authorization")


def test_a_bad_origin_entry_is_a_configuration_error(tmp_path: Path, daemon_kit: Any) -> None:
    from agentrt.runtime.kernel._errors import ConfigError

    with pytest.raises(ConfigError, match=r"server\.allowed_origins"):
        daemon_kit.config(tmp_path, server={"allowed_origins": ["https://x.example/app"]})
