"""Time to first token through each surface: how long after the model
backend produced a run's first piece of text does a client see it?

The sim-server (in this process, a per-token latency of ``--token-ms``)
serves an OpenAI-compatible backend wrapped to note when each call's first
text left it.  ``--runs`` runs per surface, ``--concurrent`` at a time:

- ``Runtime.stream``: the first ``TokenDelta`` with text;
- ``daemon SSE``: ``POST /v1/runs`` (with ``stream_tokens``) then
  ``GET /v1/runs/{id}/events``, the first ``token`` event with text (a
  daemon in this process, its HTTP server on its own thread);
- ``OpenAI stream``: ``POST /v1/chat/completions`` with ``stream: true``,
  the first chunk with ``content``.

Reported per surface: the lag (client receipt minus backend production)
p50, p95 and max, against the target of 100 ms (issue 15).  Exits 0 on a
MISS, like the other benches.

    python bench/streaming.py                    # 20 runs per surface, 4 at a time
    python bench/streaming.py --runs 50 --concurrent 25
    python bench/streaming.py --smoke            # 4 runs per surface, checks (CI)

``--smoke`` (what CI runs): 4 runs per surface, all at once (seconds), then
checks, exiting 1 when one fails: every run's first text reached the client,
never before the backend produced it (a lag >= 0), and the p95 lag is at
most half the time the reply takes to stream (``--reply-tokens`` x
``--token-ms``, 600 ms by default): a surface that buffered the reply would
show about all of it.  A loose, relative bound (the target, 100 ms, is a
sixth of the default reply), since a loaded machine moves wall-clock
figures: the 100 ms target is reported, not checked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any, Final, Self

import _smoke
import anyio
import httpx

from agentrt.protocols import ModelReply, ModelRequest, RunStarted, TokenDelta
from agentrt.runtime.config._config_file import config_from_mapping
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.models._backend import StreamDelta
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig
from agentrt.runtime.serve._daemon import DaemonEndpoint, run_daemon
from agentrt.testing import SimServer, SimServerConfig

TARGET_MS: Final = 100.0
SMOKE_SHARE: Final = 0.5
"""``--smoke``: the p95 lag over the reply's streaming time, at most."""
SMOKE_SIZES: Final = {"runs": 4, "concurrent": 4}
Via = Callable[["httpx.AsyncClient", "FirstText"], Awaitable[float]]
TASK: Final = "Say something long."


class FirstText:
    """A backend noting when each call's first text left it, by request id."""

    def __init__(self, inner: OpenAIBackend) -> None:
        self.inner = inner
        self.first: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def models(self) -> list[str]:
        return self.inner.models

    async def complete(self, request: ModelRequest) -> ModelReply:
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta, None]:
        key = request.request_id or ""
        async with aclosing(self.inner.stream(request)) as deltas:
            async for delta in deltas:
                if delta.content and key not in self.first:
                    self.first[key] = time.monotonic()
                yield delta

    def lag(self, run_id: str, seen: float) -> float:
        """Seconds from the run's first step's first text to ``seen``."""
        return seen - self.first[f"{run_id}-r0-0"]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def via_runtime(rt: Runtime, backend: FirstText) -> float:
    run_id = ""
    async with rt.stream(TASK) as events:
        async for event in events:
            if isinstance(event, RunStarted):
                run_id = event.run_id
            elif isinstance(event, TokenDelta) and event.text:
                seen = time.monotonic()
                async for _ in events:  # the rest of the run
                    pass
                return backend.lag(run_id, seen)
    raise RuntimeError("no token came")


async def via_sse(client: httpx.AsyncClient, backend: FirstText) -> float:
    # Posted, then followed: asks to stream from the run's first call.
    body = {"task": TASK, "agent": "talker", "stream_tokens": True}
    posted = await client.post("/v1/runs", json=body)
    run_id = posted.json()["run_id"]
    seen: float | None = None
    event = ""
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif (
                line.startswith("data: ")
                and event == "token"
                and seen is None
                and json.loads(line[6:])["text"]
            ):
                seen = time.monotonic()
    if seen is None:
        raise RuntimeError("no token event came")
    return backend.lag(run_id, seen)


async def via_openai(client: httpx.AsyncClient, backend: FirstText) -> float:
    body = {
        "model": "agentrt/talker",
        "stream": True,
        "messages": [{"role": "user", "content": TASK}],
    }
    seen: float | None = None
    run_id = ""
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk: dict[str, Any] = json.loads(line[6:])
            run_id = chunk["id"].removeprefix("chatcmpl-")
            delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
            if delta.get("content") and seen is None:
                seen = time.monotonic()
    if seen is None:
        raise RuntimeError("no content chunk came")
    return backend.lag(run_id, seen)


async def measure(runs: int, concurrent: int, one: Callable[[], Awaitable[float]]) -> list[float]:
    lags: list[float] = []
    limit = anyio.Semaphore(concurrent)

    async def run() -> None:
        async with limit:
            lags.append(await one())

    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(run)
    return lags


def p95_ms(lags: list[float]) -> float:
    ms = sorted(x * 1000 for x in lags)
    return ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]


def row(surface: str, lags: list[float]) -> str:
    ms = sorted(x * 1000 for x in lags)
    p95 = p95_ms(lags)
    verdict = "PASS" if p95 <= TARGET_MS else "MISS"
    return (
        f"{surface:>16} {len(ms):>5} {statistics.median(ms):>8.1f} {p95:>8.1f} "
        f"{ms[-1]:>8.1f} {TARGET_MS:>8.0f} {verdict:>6}"
    )


def smoke_checks(args: argparse.Namespace, measured: dict[str, list[float]]) -> int:
    """``--smoke``: every run measured, lags possible, and the surfaces streaming."""
    reply_ms = args.reply_tokens * args.token_ms
    bound = SMOKE_SHARE * reply_ms
    checks: list[tuple[str, str, bool]] = []
    for surface, lags in measured.items():
        p95 = p95_ms(lags) if lags else float("nan")
        checks += [
            (f"{surface}: {args.runs} runs, every lag >= 0",
             f"{len(lags)}, min {min(lags, default=float('nan')) * 1000:.1f} ms",
             len(lags) == args.runs and min(lags) >= 0),
            (f"{surface}: p95 lag <= {SMOKE_SHARE:g} x the reply ({bound:.0f} ms)",
             f"{p95:.1f} ms", p95 <= bound),
        ]  # fmt: skip
    print(f"\nsmoke checks (loose: the lag against the reply's {reply_ms:.0f} ms of streaming, "
          f"not {TARGET_MS:.0f} ms; wall-clock targets are reported, not checked)")  # fmt: skip
    return _smoke.verdict(checks, 52, 18)


async def main(args: argparse.Namespace) -> int:
    sim = SimServerConfig(
        ttft_ms=args.ttft_ms,
        token_ms=args.token_ms,
        reply_tokens=args.reply_tokens,
        tool_rounds=0,
        stream_tick_ms=5,
    )
    rows: list[str] = []
    measured: dict[str, list[float]] = {}
    async with SimServer(sim) as server:
        config = OpenAIBackendConfig(name="sim", base_url=server.url + "/v1", models=["sim"])
        async with OpenAIBackend(config) as inner:
            backend = FirstText(inner)
            async with Runtime(backends=[backend]) as rt:
                lags = await measure(args.runs, args.concurrent, lambda: via_runtime(rt, backend))
                rows.append(row("Runtime.stream", lags))
                measured["Runtime.stream"] = lags
            with tempfile.TemporaryDirectory() as tmp:
                daemon = config_from_mapping(
                    {
                        "server": {"port": 0, "shutdown_grace_s": 0.5},
                        "store": {"path": str(Path(tmp) / "runs.db")},
                        "agents": {"talker": {"instructions": "Talk."}},
                        "warm_prefix": False,
                    },
                    source="bench/streaming.py",
                )
                async with anyio.create_task_group() as tg:
                    endpoint: DaemonEndpoint = await tg.start(
                        lambda task_status: run_daemon(
                            daemon, backends=[backend], task_status=task_status
                        )
                    )
                    async with httpx.AsyncClient(base_url=endpoint.url, timeout=60) as client:
                        surfaces: list[tuple[str, Via]] = [
                            ("daemon SSE", via_sse),
                            ("OpenAI stream", via_openai),
                        ]
                        for surface, via in surfaces:
                            lags = await measure(
                                args.runs, args.concurrent, partial(via, client, backend)
                            )
                            rows.append(row(surface, lags))
                            measured[surface] = lags
                    tg.cancel_scope.cancel()
    print(
        f"time to first token: sim-server {args.ttft_ms:g} ms to the first token, "
        f"{args.token_ms:g} ms per token, {args.reply_tokens} tokens; "
        f"{args.runs} runs per surface, {args.concurrent} at a time"
    )
    head = ("surface", "runs", "p50 ms", "p95 ms", "max ms", "target")
    print(f"{head[0]:>16} {head[1]:>5} " + " ".join(f"{h:>8}" for h in head[2:]) + " result")
    for line in rows:
        print(line)
    return smoke_checks(args, measured) if args.smoke else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per surface")
    parser.add_argument("--concurrent", type=int, default=4, help="runs at a time")
    parser.add_argument("--ttft-ms", type=float, default=40.0)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--reply-tokens", type=int, default=30)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI's short form: {SMOKE_SIZES['runs']} runs per surface, all at once; exits 1 "
        f"when a run's first text is missing or its p95 lag exceeds {SMOKE_SHARE:g} x the "
        f"reply's streaming time (loose: the {TARGET_MS:.0f} ms target is reported, not checked)",
    )
    if parser.parse_known_args(argv)[0].smoke:
        parser.set_defaults(**SMOKE_SIZES)  # explicit options still win
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse(), backend="asyncio"))
