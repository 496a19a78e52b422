"""Context budgeting with the backend's own tokenizer: chars per token
measured once per backend (llama.cpp's vocabulary for the embedded model, a
server's ``POST /tokenize``), the embedded model's context window, and the
agent's context budget fitted to both where its author left them unset."""

from __future__ import annotations

import json

import httpx
import pytest

from agentrt.agents import Agent, AgentConfig, EventEmitter
from agentrt.agents._context import fit_context
from agentrt.runtime.budget._ledger import BudgetLedger
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._errors import BackendError
from agentrt.runtime.models._prompt_estimate import (
    CALIBRATION_MARGIN,
    CALIBRATION_TEXT,
    TokenCounter,
    calibrate_chars_per_token,
)
from agentrt.runtime.models.openai._openai_backend import OpenAIBackend, OpenAIBackendConfig

pytestmark = pytest.mark.anyio


class _Counter:
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.calls = 0

    async def count_tokens(self, text: str) -> int:
        self.calls += 1
        assert text == CALIBRATION_TEXT
        return self.tokens


async def test_calibration_is_the_tokenizers_ratio_with_a_margin() -> None:
    counter = _Counter(tokens=len(CALIBRATION_TEXT) // 4)
    assert isinstance(counter, TokenCounter)
    ratio = await calibrate_chars_per_token(counter)
    expected = len(CALIBRATION_TEXT) / (len(CALIBRATION_TEXT) // 4) * CALIBRATION_MARGIN
    assert ratio == pytest.approx(expected, abs=1e-3)
    with pytest.raises(ValueError, match="counted 0 tokens"):
        await calibrate_chars_per_token(_Counter(tokens=0))


def test_fit_context_fills_only_what_the_author_left_unset() -> None:
    plain = AgentConfig(name="a")
    fitted = fit_context(plain, chars_per_token=3.7, window_tokens=8192)
    assert fitted.context.chars_per_token == 3.7
    assert fitted.context.budget_tokens == 8192 - plain.limits.max_tokens_per_step
    mine = AgentConfig.model_validate(
        {"name": "b", "context": {"chars_per_token": 2.5, "budget_tokens": 4000}}
    )
    assert fit_context(mine, chars_per_token=3.7, window_tokens=8192) is mine
    assert fit_context(plain, chars_per_token=None, window_tokens=None) is plain
    big = fit_context(plain, chars_per_token=None, window_tokens=1_000_000)
    assert big.context.budget_tokens == plain.context.budget_tokens  # never raised past it


async def test_an_openai_kind_backend_counts_with_the_servers_tokenize() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/tokenize":  # vLLM's reply shape
            prompt = json.loads(request.content)["prompt"]
            tokens = list(range(len(prompt) // 4))
            return httpx.Response(200, json={"count": len(tokens), "tokens": tokens})
        return httpx.Response(404, json={"detail": "Not Found"})

    config = OpenAIBackendConfig(base_url="http://vllm.test/v1", models=["smol"])
    async with OpenAIBackend(config, transport=httpx.MockTransport(handler)) as backend:
        assert isinstance(backend, TokenCounter)
        assert await backend.count_tokens("x" * 400) == 100
    assert json.loads(seen[0].content)["model"] == "smol"

    missing = OpenAIBackendConfig(base_url="http://plain.test/v1", models=["gpt"])
    lacking = httpx.MockTransport(lambda _: httpx.Response(404, json={"detail": "Not Found"}))
    async with OpenAIBackend(missing, transport=lacking) as backend:
        with pytest.raises(BackendError, match="/tokenize answered HTTP 404"):
            await backend.count_tokens("hello")


@pytest.mark.embedded
async def test_the_embedded_models_context_is_its_8192_tokens_and_its_own_tokenizer() -> None:
    async with Runtime() as rt:
        model = rt.default_model
        assert model is not None
        backend = next(iter(rt.backends.values()))
        assert getattr(backend, "context_window", None) == 8192  # SmolLM2's trained context
        ratio = rt.chars_per_token[model]
        counted = await backend.count_tokens(CALIBRATION_TEXT)  # type: ignore[attr-defined]
        assert ratio == pytest.approx(len(CALIBRATION_TEXT) / counted * CALIBRATION_MARGIN, 1e-3)
        assert ratio != 3.0
        agent = rt.runner(None, EventEmitter(), BudgetLedger("fit"), None)
        assert isinstance(agent, Agent)
        assert agent.config.context.chars_per_token == ratio
        room = 8192 - agent.config.limits.max_tokens_per_step
        assert agent.config.context.budget_tokens == room
