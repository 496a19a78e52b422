"""The sim-server's shared state (``SimEngine``): model, prefix cache, faults,
counters, the timing model and the read-outs.

No I/O here; the handlers in ``sim_app`` do the HTTP.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from agentrt.runtime.testing.sim._faults import FaultInjector
from agentrt.runtime.testing.sim._radix import RadixCache
from agentrt.runtime.testing.sim._sim_chat import ChatPromptCache
from agentrt.runtime.testing.sim._sim_config import FaultKind, SimServerConfig
from agentrt.runtime.testing.sim._sim_model import PromptView, SimChoice, SimModel

#: Paths that generate (and so draw faults); the others never fail.
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
_ATTEMPTS_LIMIT = 1 << 20  # request ids remembered for attempt counting


class SimEngine:
    """Shared, single-event-loop state of one sim-server: the ``SimModel``,
    ``RadixCache`` and ``FaultInjector``, request/token/concurrency counters
    (``completed``: replies served and counted; ``abandoned``: left by the
    client first), attempts per request id, ``/metrics`` and ``/sim/stats``.

    Timing: the first token after ``ttft_ms`` plus ``prefill_ms_per_1k`` per
    1,000 uncached prompt tokens; then ``token_ms`` per token; ``n`` samples
    decode in parallel.  A completed request's sequences enter the cache
    (failed or abandoned ones leave nothing)."""

    def __init__(self, config: SimServerConfig) -> None:
        self.config = config
        self.model = SimModel(config)
        self.chats = ChatPromptCache()
        self.cache = RadixCache(config.cache_tokens)
        self.faults = FaultInjector(config.fault_rates(), config.seed)
        self.started_at = time.time()
        self._ids = 0
        self.in_flight = 0
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero every counter (the cache contents and in-flight count stay)."""
        self.requests: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.attempts: Counter[str] = Counter()
        self.roles: dict[str, list[str]] = {}
        """The roles of each chat request's messages, by request id: what a
        test counts to see a conversation reached the server natively."""
        self.max_in_flight = self.in_flight
        self.prompt_tokens = 0
        self.completion_tokens = 0
        # What the abandoned requests got through: their prompts, and the
        # tokens generated before the client went away.
        self.abandoned_prompt_tokens = 0
        self.abandoned_completion_tokens = 0
        self.cached_tokens = 0
        self.completed = 0
        self.abandoned = 0
        self.restarts = 0
        self.faults.injected = dict.fromkeys(self.faults.injected, 0)
        c = self.cache
        c.query_requests = c.hit_requests = c.query_tokens = c.hit_tokens = 0

    def next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:x}"

    # -- request lifecycle -------------------------------------------------

    def admit(self, path: str, request_id: str | None) -> FaultKind | None:
        """Count a request and draw its fault (generation paths only)."""
        self.requests[path] += 1
        if request_id:
            if len(self.attempts) >= _ATTEMPTS_LIMIT:
                self.attempts.clear()
            self.attempts[request_id] += 1
        if path not in GENERATION_PATHS:
            return None
        return self.faults.draw()

    def saw_messages(self, request_id: str | None, roles: list[str]) -> None:
        """Note the roles of a chat request's messages (with a request id)."""
        if request_id:
            if len(self.roles) >= _ATTEMPTS_LIMIT:
                self.roles.clear()
            self.roles[request_id] = roles

    def enter(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self, *, abandoned: bool = False) -> None:
        """A generation request is done; ``abandoned``: its handler was
        cancelled (the client went away) before it completed."""
        self.in_flight -= 1
        self.abandoned += abandoned

    def prefill(self, prompt_ids: list[int]) -> tuple[int, float]:
        """Match the prompt in the cache: (cached tokens, seconds to first token)."""
        cached = self.cache.match(prompt_ids)
        uncached = len(prompt_ids) - cached
        seconds = (self.config.ttft_ms + self.config.prefill_ms_per_1k * uncached / 1000) / 1000
        return cached, seconds

    def reply(
        self,
        view: PromptView,
        *,
        seed: int | None,
        index: int,
        temperature: float,
        max_tokens: int,
        parallel: bool = True,
    ) -> SimChoice:
        """One sample, with the malformed-tool-JSON fault drawn (and counted)
        for replies that call tools."""
        bad = self.model.wants_tools(view) and self.faults.draw_bad_tool_json()
        if bad:
            self.faults.record("bad_tool_json")
        return self.model.reply(
            view,
            seed=seed,
            index=index,
            temperature=temperature,
            max_tokens=max_tokens,
            parallel=parallel,
            bad_json=bad,
        )

    def decode_seconds(self, completion_tokens: int) -> float:
        """Time from the first to the last of ``completion_tokens`` tokens."""
        return max(completion_tokens - 1, 0) * self.config.token_ms / 1000

    def complete(
        self, full_ids: list[list[int]], prompt_tokens: int, completion: int, cached: int
    ) -> None:
        """Record a finished request: cache its sequences, count its tokens."""
        for ids in full_ids:
            self.cache.insert(ids)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion
        self.cached_tokens += cached
        self.completed += 1

    def flush_cache(self) -> None:
        self.cache.flush()

    # -- read-outs ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The ``/sim/stats`` document."""
        c = self.cache
        total_attempts = sum(self.attempts.values())
        return {
            "model": self.config.model,
            "uptime_s": round(time.time() - self.started_at, 3),
            "requests": dict(self.requests),
            "requests_total": sum(self.requests.values()),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "faults": dict(self.faults.injected),
            "restarts": self.restarts,
            "in_flight": self.in_flight,
            "max_concurrent": self.max_in_flight,
            "generations": {
                "completed": self.completed,
                "abandoned": self.abandoned,
            },
            "tokens": {
                "prompt": self.prompt_tokens,
                "completion": self.completion_tokens,
                "cached": self.cached_tokens,
                "abandoned_prompt": self.abandoned_prompt_tokens,
                "abandoned_completion": self.abandoned_completion_tokens,
            },
            "cache": {
                "query_requests": c.query_requests,
                "hit_requests": c.hit_requests,
                "query_tokens": c.query_tokens,
                "hit_tokens": c.hit_tokens,
                "hit_rate": round(c.hit_rate, 6),
                "size_tokens": c.size_tokens,
                "evicted_tokens": c.evicted_tokens,
            },
            "request_ids": {
                "distinct": len(self.attempts),
                "attempts": total_attempts,
                "max_attempts": max(self.attempts.values(), default=0),
                "mean_attempts": round(total_attempts / len(self.attempts), 6)
                if self.attempts
                else 0.0,
            },
        }

    def metrics(self) -> str:
        """Prometheus text exposition (``/metrics``)."""
        c = self.cache
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP sim:{name} {help_}")
            lines.append(f"# TYPE sim:{name} {kind}")
            lines.extend(f"sim:{name}{labels} {value:g}" for labels, value in samples)

        metric(
            "requests_total",
            "counter",
            "HTTP requests received, by path.",
            [(f'{{path="{p}"}}', n) for p, n in sorted(self.requests.items())],
        )
        metric(
            "num_requests_running",
            "gauge",
            "Generation requests in flight.",
            [("", self.in_flight)],
        )
        metric(
            "max_concurrent_requests",
            "gauge",
            "Most generation requests in flight at once.",
            [("", self.max_in_flight)],
        )
        metric(
            "prompt_tokens_total", "counter", "Prompt tokens processed.", [("", self.prompt_tokens)]
        )
        metric(
            "generation_tokens_total",
            "counter",
            "Tokens generated.",
            [("", self.completion_tokens)],
        )
        metric(
            "cached_tokens_total",
            "counter",
            "Prompt tokens served from the prefix cache.",
            [("", self.cached_tokens)],
        )
        metric(
            "prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache (as vLLM counts).",
            [("", c.query_tokens)],
        )
        metric(
            "prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache (as vLLM counts).",
            [("", c.hit_tokens)],
        )
        metric(
            "prefix_cache_requests_total",
            "counter",
            "Requests that queried the prefix cache.",
            [("", c.query_requests)],
        )
        metric(
            "prefix_cache_hit_requests_total",
            "counter",
            "Requests that found a cached prefix.",
            [("", c.hit_requests)],
        )
        metric(
            "cache_hit_rate",
            "gauge",
            "Cached over queried prompt tokens since start (as SGLang reports).",
            [("", round(c.hit_rate, 6))],
        )
        metric(
            "cache_size_tokens", "gauge", "Tokens held by the prefix cache.", [("", c.size_tokens)]
        )
        metric(
            "faults_injected_total",
            "counter",
            "Faults injected, by kind.",
            [(f'{{kind="{k}"}}', n) for k, n in self.faults.injected.items()],
        )
        metric("restarts_total", "counter", "Simulated restarts.", [("", self.restarts)])
        return "\n".join(lines) + "\n"
