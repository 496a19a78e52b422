"""Real model end to end: ``agentrt run --rollouts 4 --aggregate rtv``.

The same command twice, through the CLI's ``main``: on the embedded model
(llama.cpp in-process) and against the real vLLM CPU server (an ``openai``
backend in a configuration file).  A 135M model's answers are irrelevant;
what is checked is the machinery:

- every rollout is summarized (4 summaries, one per rollout id, each with an
  answer or a failure mode);
- the bracket is complete: RTV with G=2 plays ``k - 1`` comparisons over
  ``ceil(log2 k)`` rounds among the ``k`` rollouts that answered (3 over 2
  for 4), every answered rollout enters round 1, each round's entrants are
  the previous round's winners, and the final winner's answer is the run's;
  a comparison whose vote did not parse counts for nobody and the tie rule
  (``first``) decides -- it must still produce a winner;
- usage is exact: every backend the CLI creates is wrapped in a recorder of
  each reply's usage as the model reported it; the run's ``cost.usage`` is
  the sum over every call (prefix warm-up, rollout steps, judge votes), its
  ``model_calls`` their count, and each summary's cost is the sum over its
  rollout's own calls.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.protocols import ModelReply, ModelRequest, RunResult, Usage, decode
from agentrt.runtime.cli._main import main
from agentrt.runtime.models._backend import ModelBackend, StreamDelta
from agentrt.runtime.models._model_registry import ModelRegistry
from tests._support.backends import ForwardingBackend
from tests._support.logs import warnings_logged

TASK = "What is 2+3?"
ROLLOUTS = 4
ARGV = [
    "run",
    TASK,
    "--rollouts",
    str(ROLLOUTS),
    "--aggregate",
    "rtv",
    "--aggregate-option",
    "g=2",
    "--aggregate-option",
    "v=1",
    "--max-tokens",
    "24",
    "--max-steps",
    "2",
    "--json",
]


class _Call:
    """One reply a backend returned: which request, what usage it reported."""

    def __init__(self, request_id: str | None, usage: Usage) -> None:
        self.request_id = request_id or ""
        self.usage = usage


class _Recording(ForwardingBackend[ModelBackend]):
    """A ``ModelBackend`` that forwards to ``inner`` and records every reply."""

    def __init__(self, inner: ModelBackend, calls: list[_Call]) -> None:
        super().__init__(inner)
        self.calls = calls

    async def complete(self, request: ModelRequest) -> ModelReply:
        reply = await self.inner.complete(request)
        self.calls.append(_Call(request.request_id, reply.usage))
        return reply

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        async for delta in self.inner.stream(request):
            if delta.reply is not None:
                self.calls.append(_Call(request.request_id, delta.reply.usage))
            yield delta


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    with warnings_logged():
        yield


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[_Call]:
    """Every reply of every backend the CLI creates, in arrival order."""
    recorded: list[_Call] = []
    create = ModelRegistry.create

    def recording_create(self: ModelRegistry, model: str | None = None) -> ModelBackend:
        return _Recording(create(self, model), recorded)

    monkeypatch.setattr(ModelRegistry, "create", recording_create)
    return recorded


def _total(usages: list[Usage]) -> Usage:
    out = Usage()
    for u in usages:
        out = out + u
    return out


def _check_run(result: RunResult, calls: list[_Call], *, warmed: bool = False) -> None:
    run_id = result.run_id
    # Every rollout summarized, once.
    ids = [s.rollout_id for s in result.summaries]
    assert ids == [f"{run_id}-r{i}" for i in range(ROLLOUTS)], ids
    for s in result.summaries:
        assert s.answer or s.failure_modes, f"{s.rollout_id} has neither answer nor failure"
    answered = [s.rollout_id for s in result.summaries if s.answer]
    assert len(answered) >= 2, f"fewer than 2 rollouts answered, no bracket: {result.summaries}"
    assert result.status == "succeeded", result.error

    # The bracket: G=2, every level fed by the previous level's winners.
    trace = result.aggregation_trace
    assert all(v["aggregator"] == "rtv" for v in trace)
    rounds = sorted({v["round"] for v in trace})
    assert rounds == list(range(1, math.ceil(math.log2(len(answered))) + 1))
    entrants = answered
    for level in rounds:
        played = [v for v in trace if v["round"] == level]
        # The bracket is drawn in a shuffled order (byes fall on no rollout
        # in particular): every entrant plays once per level.
        assert sorted(c for v in played for c in v["candidates"]) == sorted(entrants)
        for v in played:
            assert len(v["candidates"]) <= 2
            assert v["winner"] in v["candidates"]
        entrants = [v["winner"] for v in played]
    assert len(entrants) == 1
    comparisons = [v for v in trace if len(v["candidates"]) == 2]
    assert len(comparisons) == len(answered) - 1
    # A comparison whose candidates give the same answer needs no judge.
    judged = [v for v in comparisons if v.get("votes")]
    by_id = {s.rollout_id: s for s in result.summaries}
    assert result.answer == by_id[entrants[0]].answer

    # Usage exact: the run's cost is the sum of what the model reported.
    assert result.cost.usage == _total([c.usage for c in calls])
    assert result.cost.model_calls == len(calls)
    # The prefix warm-up (off by default) is a call like any other: charged.
    warm = [c for c in calls if c.request_id == f"{run_id}-warm"]
    assert len(warm) == int(warmed)
    steps = 0
    for s in result.summaries:
        own = [c for c in calls if c.request_id.startswith(f"{s.rollout_id}-")]
        assert own, f"{s.rollout_id} made no model call"
        assert s.cost.usage == _total([c.usage for c in own])
        assert s.cost.model_calls == len(own)
        steps += len(own)
    # The rest are the judge's votes: one per judged comparison (V=1), and
    # one more for each reply without a readable verdict (asked again once).
    judge = [c for c in calls if c not in warm and not c.request_id.startswith(f"{run_id}-r")]
    assert len(calls) - steps - len(warm) == len(judge)
    assert len(judged) <= len(judge) <= 2 * len(judged), (judged, judge)
    assert all(c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0 for c in calls)


@pytest.mark.embedded
@pytest.mark.slow
def test_run_rtv_on_the_embedded_model(
    calls: list[_Call], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(ARGV)
    result = decode(capsys.readouterr().out, RunResult)
    assert code == (0 if result.status == "succeeded" else 1)
    _check_run(result, calls)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_run_rtv_against_the_vllm_server(
    vllm_server: Any, calls: list[_Call], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agentrt.toml"
    config.write_text(
        "warm_prefix = true\n\n[models]\ndefault = 'vllm'\n\n[models.backends.vllm]\n"
        "kind = 'openai'\n"
        f"base_url = '{vllm_server.base_url}/v1'\nmodels = ['{vllm_server.model}']\n"
    )
    code = main([*ARGV, "--config", str(config), "--model", vllm_server.model])
    result = decode(capsys.readouterr().out, RunResult)
    assert code == (0 if result.status == "succeeded" else 1)
    _check_run(result, calls, warmed=True)
