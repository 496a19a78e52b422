"""Schemathesis against a running daemon's OpenAPI document.

An ``agentrt serve`` process (a scripted model, a bearer token, at most two
rollouts a run) is fuzzed by the ``schemathesis`` command line: the coverage,
fuzzing and stateful phases (the document's links feed created run ids to
the other operations), each part of the document fuzzed once.  agentrt's
own API (``/v1/runs``, ``/v1/agents``, ``/v1/threads``, ``/v1/elicitations``)
gets every check, and so is checked both ways: every request the document
allows is accepted (the rollouts limit, the aggregators' options and whether
USD caps are taken are in the document) and every request it forbids is
refused.  The rest of the document, the OpenAI-compatible endpoints
included, gets every other check in a second run: no 500, every status
code documented, content types and response bodies (SSE events included)
as documented, schema-violating requests refused, a 405 with a matching
``Allow``, and requests without the token refused.  (The OpenAI endpoints
refuse some requests their OpenAI-shaped schema allows, such as a
conversation without a user message; and a run asked for a
``response_format`` the scripted model's answer cannot match fails: a 502
naming the schema, the one 5xx allowed.)

Then each run's recorded exchanges (a HAR report) are replayed here: every
4xx must be a clear error body with a non-empty ``message`` (an ``ApiError``
with its own status from agentrt's own API and the token guard, an OpenAI
``ErrorBody`` from the other routes), the daemon's log must show no request
or run that crashed (a crash after an event stream has started never
reaches the client as a 5xx; a run that fails to settle answers nothing
wrong at all), and the daemon must shut down cleanly on SIGTERM afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest

from agentrt.protocols._api import ApiError
from agentrt.runtime.wire._common import ErrorBody
from tests._support.configs import scripted_models

pytestmark = pytest.mark.process

TOKEN = "fuzz-token-0123456789abcdef"
#: Examples per operation and phase: about 12 s of fuzzing on two slow cores.
MAX_EXAMPLES = 30
SEED = 20261130
#: Routes whose refusals have OpenAI's shape.
#: agentrt's own API, whose document must match what it accepts.
OWN_API = "^/v1/(runs|agents|threads|elicitations)"


@dataclass(frozen=True, slots=True)
class Daemon:
    url: str
    log: Path


def _wait_for_url(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    """The ``url`` of the daemon's ``daemon_serving`` log line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if '"daemon_serving"' in line:
                return str(json.loads(line)["url"])
        assert proc.poll() is None, f"the daemon exited: {log.read_text()[-3000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no daemon_serving line in {timeout_s} s: {log.read_text()[-3000:]}")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f"""
[server]
port = 0
token = "{TOKEN}"
max_rollouts = 2
shutdown_grace_s = 1

[store]
path = "runs.db"

{scripted_models(["4"], backend="scripted")}
[agents.solver]
instructions = "Answer with a number."
tools = ["calculator"]
"""
    )
    log = tmp_path / "daemon.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt", "serve", "--config", str(config), "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            cwd=tmp_path,
        )
    try:
        yield Daemon(url=_wait_for_url(proc, log, 60.0), log=log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, f"unclean shutdown: {log.read_text()[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def openai_error_problem(text: str) -> str | None:
    """Why a 4xx body is not a clear OpenAI-shaped ``ErrorBody``, or None."""
    try:
        detail = msgspec.json.decode(text, type=ErrorBody).error
    except msgspec.DecodeError as exc:
        return f"not an OpenAI error body: {exc}"
    if not detail.message.strip():
        return "empty message"
    if detail.type != "invalid_request_error":
        return f"error type {detail.type!r} for a 4xx"
    return None


def api_error_problem(status: int, text: str) -> str | None:
    """Why a 4xx body is not a clear ``ApiError``, or None."""
    try:
        body = msgspec.json.decode(text, type=ApiError)
    except msgspec.DecodeError as exc:
        return f"not an ApiError: {exc}"
    if not body.message.strip():
        return "empty message"
    if not body.error.strip():
        return "empty error kind"
    if body.status != status:
        return f"body says status {body.status}, the response {status}"
    return None


def error_body_problem(
    status: int, mime_type: str, text: str, *, openai: bool = False
) -> str | None:
    """Why a 4xx response is not a clear ``ApiError`` body (``openai``: an
    OpenAI-shaped ``ErrorBody``, as the OpenAI-compatible routes answer), or None."""
    if not mime_type.startswith("application/json"):
        return f"content type {mime_type!r}, not application/json"
    return openai_error_problem(text) if openai else api_error_problem(status, text)


@pytest.mark.parametrize(
    ("mime", "text", "expected"),
    [
        ("application/json", '{"error":"not_found","message":"no run \'x\'","status":404}', None),
        ("text/plain", "Not Found", "content type"),
        ("application/json", '{"detail":"Not Found"}', "not an ApiError"),
        ("application/json", '{"error":"not_found","message":" ","status":404}', "empty message"),
        ("application/json", '{"error":"","message":"no run","status":404}', "empty error"),
        ("application/json", '{"error":"not_found","message":"no run","status":400}', "status"),
    ],
)
def test_error_body_problem_tells_clear_bodies_from_unclear_ones(
    mime: str, text: str, expected: str | None
) -> None:
    problem = error_body_problem(404, mime, text)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}',
            None,
        ),
        ('{"error":"not_found","message":"no run","status":404}', "not an OpenAI error body"),
        (
            '{"error":{"message":" ","type":"invalid_request_error","param":null,"code":null}}',
            "empty",
        ),
        ('{"error":{"message":"x","type":"server_error","param":null,"code":null}}', "error type"),
    ],
)
def test_openai_error_problem_tells_clear_bodies_from_unclear_ones(
    text: str, expected: str | None
) -> None:
    problem = error_body_problem(400, "application/json", text, openai=True)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem


def _schemathesis(url: str, cwd: Path, *options: str) -> str:
    """Run the schemathesis command line on ``url``'s document; its output."""
    argv = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        # One worker: CPython 3.11.7's AST constructor counts its recursion
        # depth in process-wide state, and hypothesis parses lambdas' source
        # (``ast.parse``) in every worker thread; two at once fail with
        # "SystemError: AST constructor recursion depth mismatch".
        "--workers",
        "1",
        "--request-timeout",
        "15",
        "--generation-database",
        "none",
        "--no-color",
        *options,
    ]
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    return output


def _allowed_5xx(entry: dict[str, Any]) -> bool:
    """A run that failed because the scripted answer could not match the
    requested response format: a 502 naming it."""
    response = entry["response"]
    if int(response["status"]) != 502:
        return False
    text = response["content"].get("text", "")
    return "response schema" in text and '"run_failed"' in text


def _exchanges(har: Path) -> list[dict[str, Any]]:
    """The requests and responses of a schemathesis HAR report."""
    entries: list[dict[str, Any]] = json.loads(har.read_text())["log"]["entries"]
    return entries


def _statuses(entries: list[dict[str, Any]], path: str | None = None) -> Counter[int]:
    """The response statuses (of requests to ``path`` only, if given)."""
    return Counter(
        int(e["response"]["status"])
        for e in entries
        if path is None or urlsplit(e["request"]["url"]).path == path
    )


def _unclear_4xx(entries: list[dict[str, Any]]) -> list[str]:
    """Each 4xx whose body is not a clear error: an ``ApiError`` from the
    guard (401) and agentrt's own API, an OpenAI ``ErrorBody`` from every
    other route under ``/v1`` (404 and 405 included)."""
    unclear: list[str] = []
    for entry in entries:
        status = int(entry["response"]["status"])
        if not 400 <= status < 500:
            continue
        content = entry["response"]["content"]
        path = urlsplit(entry["request"]["url"]).path
        problem = error_body_problem(
            status,
            content.get("mimeType", ""),
            content.get("text", ""),
            openai=status != 401 and path.startswith("/v1/") and not re.match(OWN_API, path),
        )
        if problem is not None:
            request = entry["request"]
            unclear.append(f"{request['method']} {request['url']} -> {status}: {problem}")
    return unclear


def _assert_no_crash(daemon: Daemon) -> None:
    log = daemon.log.read_text(errors="replace")
    crashed = [m for m in ("request_crashed", "Exception in ASGI", "Traceback") if m in log]
    assert not crashed, log[-5000:]


# agentrt's own API at 30 examples an operation: about 40 s on a quiet
# machine (mostly the coverage phase: some 2,200 bodies for the two
# operations that start runs), and several times that on a loaded one.
@pytest.mark.slow
@pytest.mark.timeout(450)
def test_the_document_is_what_the_own_api_accepts_and_refuses(
    daemon: Daemon, tmp_path: Path
) -> None:
    """Every check on agentrt's own API (only here: the other test leaves
    these routes out), and every 4xx it answers is a clear ``ApiError``."""
    har = tmp_path / "own.har"
    _schemathesis(
        daemon.url,
        tmp_path,
        "--include-path-regex",
        OWN_API,
        *("--report", "har", "--report-har-path", str(har)),
    )
    entries = _exchanges(har)
    # The fuzzing reached the API: runs created, refusals of each kind answered.
    statuses = _statuses(entries)
    for expected in (200, 201, 401, 404, 405, 422):
        assert statuses[expected] > 0, f"no {expected} among {dict(statuses)}"
    unclear = _unclear_4xx(entries)
    assert not unclear, "\n".join(unclear[:20])
    _assert_no_crash(daemon)


# Everything but agentrt's own API (the test above covers it with every
# check): about 30 s on a loaded machine.
@pytest.mark.slow
@pytest.mark.timeout(450)
def test_schemathesis_finds_nothing_and_every_4xx_is_an_api_error(
    daemon: Daemon, tmp_path: Path
) -> None:
    har = tmp_path / "fuzz.har"
    _schemathesis(
        daemon.url,
        tmp_path,
        *("--exclude-path-regex", OWN_API),
        "--exclude-checks",
        "positive_data_acceptance,not_a_server_error",
        *("--report", "har", "--report-har-path", str(har)),
    )

    entries = _exchanges(har)
    errors = [e for e in entries if int(e["response"]["status"]) >= 500 and not _allowed_5xx(e)]
    assert not errors, [e["response"]["content"].get("text", "")[:500] for e in errors[:5]]
    # The fuzzing reached the routes: answers and refusals of each kind.
    statuses = _statuses(entries)
    for expected in (200, 400, 401, 404, 405):
        assert statuses[expected] > 0, f"no {expected} among {dict(statuses)}"
    # ... the OpenAI-compatible endpoints among them.
    for path in ("/v1/chat/completions", "/v1/responses"):
        answered = _statuses(entries, path)
        assert answered[200] > 0, (path, answered)
        assert answered[400] > 0, (path, answered)
    unclear = _unclear_4xx(entries)
    assert not unclear, "\n".join(unclear[:20])
    _assert_no_crash(daemon)
