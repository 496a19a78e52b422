"""Bad ``ScalingSpec``/``Budget``/``RunRequest`` arguments fail where they are
made, naming the type and the field: on construction (``ValueError`` or
``TypeError``) and on decoding (``msgspec.ValidationError`` with the path)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from agentrt.protocols import Budget, RunRequest, ScalingSpec


def _wrong(value: object) -> Any:
    """``value`` as a type checker would let through (a caller without one)."""
    return value


BAD: list[tuple[Callable[[], object], type[Exception], str]] = [
    (lambda: ScalingSpec(rollouts=0), ValueError, "ScalingSpec.rollouts must be >= 1, got 0"),
    (lambda: ScalingSpec(rollouts=-3), ValueError, "ScalingSpec.rollouts must be >= 1, got -3"),
    (lambda: ScalingSpec(rollouts=_wrong(2.0)), TypeError, "ScalingSpec.rollouts must be an int"),
    (lambda: ScalingSpec(rollouts=True), TypeError, "ScalingSpec.rollouts must be an int"),
    (
        lambda: ScalingSpec(aggregate=_wrong(3)),
        TypeError,
        "ScalingSpec.aggregate must be an aggregator name",
    ),
    (lambda: ScalingSpec(aggregate=_wrong(None)), TypeError, "ScalingSpec.aggregate"),
    (
        lambda: ScalingSpec(options=_wrong([("g", 2)])),
        TypeError,
        "ScalingSpec.options must be a dict",
    ),
    (lambda: ScalingSpec(options=_wrong("g=2")), TypeError, "ScalingSpec.options must be a dict"),
    (lambda: ScalingSpec(options=_wrong({2: "g"})), TypeError, "ScalingSpec.options keys"),
    (lambda: Budget(max_tokens=-1), ValueError, "Budget.max_tokens must be >= 0, got -1"),
    (lambda: Budget(max_model_calls=-5), ValueError, "Budget.max_model_calls must be >= 0"),
    (lambda: Budget(max_usd=-0.01), ValueError, "Budget.max_usd must be >= 0, got -0.01"),
    (lambda: Budget(max_wall_seconds=-1.0), ValueError, "Budget.max_wall_seconds must be >= 0"),
    (lambda: Budget(max_usd=math.nan), ValueError, "Budget.max_usd must be finite"),
    (lambda: Budget(max_usd=math.inf), ValueError, "Budget.max_usd must be finite"),
    (
        lambda: Budget(max_wall_seconds=-math.inf),
        ValueError,
        "Budget.max_wall_seconds must be finite",
    ),
    (lambda: Budget(max_tokens=_wrong(1.5)), TypeError, "Budget.max_tokens must be an int"),
    (lambda: Budget(max_tokens=False), TypeError, "Budget.max_tokens must be an int"),
    (lambda: Budget(max_usd=_wrong("2")), TypeError, "Budget.max_usd must be a number"),
    (
        lambda: RunRequest(task="t", scaling=_wrong({"rollouts": 2})),
        TypeError,
        "RunRequest.scaling must be a ScalingSpec, got dict",
    ),
    (
        lambda: RunRequest(task="t", budget=_wrong({"max_tokens": 9})),
        TypeError,
        "RunRequest.budget must be a Budget",
    ),
    (lambda: RunRequest(task=_wrong(None)), TypeError, "RunRequest.task must be a str"),
]


@pytest.mark.parametrize(("make", "error", "message"), BAD)
def test_bad_arguments_fail_at_construction(
    make: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        make()


def test_replace_checks_too() -> None:
    with pytest.raises(ValueError, match=r"ScalingSpec\.rollouts must be >= 1"):
        msgspec.structs.replace(ScalingSpec(rollouts=2), rollouts=0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"task": "t", "scaling": {"rollouts": 0}}, "`int` >= 1 - at `$.scaling.rollouts`"),
        ({"task": "t", "scaling": {"aggregate": 3}}, "`str`, got `int` - at `$.scaling.aggregate`"),
        ({"task": "t", "scaling": {"options": [1]}}, "got `array` - at `$.scaling.options`"),
        ({"task": "t", "budget": {"max_tokens": -1}}, ">= 0 - at `$.budget.max_tokens`"),
        ({"task": "t", "budget": {"max_usd": math.inf}}, "Budget.max_usd must be finite"),
        ({"task": "t", "budget": {"max_usd": math.nan}}, "at `$.budget.max_usd`"),
    ],
)
def test_converting_bad_data_names_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape(message)):
        msgspec.convert(data, RunRequest)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"task": "t", "scaling": {"rollouts": 0}}', "- at `$.scaling.rollouts`"),
        (b'{"task": "t", "scaling": {"options": "x"}}', "- at `$.scaling.options`"),
        (b'{"task": "t", "budget": {"max_model_calls": -2}}', "- at `$.budget.max_model_calls`"),
        (b'{"task": "t", "budget": {"max_usd": 1e999}}', "- at `$.budget.max_usd`"),
        (b'{"task": "t", "scaling": {"rollouts": 2.5}}', "- at `$.scaling.rollouts`"),
    ],
)
def test_decoding_bad_json_names_the_field(body: bytes, message: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape(message)):
        msgspec.json.decode(body, type=RunRequest)


def test_good_values_are_kept_and_round_trip() -> None:
    budget = Budget(max_tokens=0, max_usd=2, max_model_calls=10, max_wall_seconds=0.5)
    scaling = ScalingSpec(rollouts=8, aggregate="rtv", options={"g": 2, "v": 8})
    request = RunRequest(task="t", scaling=scaling, budget=budget)
    assert msgspec.json.decode(msgspec.json.encode(request), type=RunRequest) == request
    assert Budget() == Budget(max_tokens=None, max_usd=None)
    assert ScalingSpec().rollouts == 1
