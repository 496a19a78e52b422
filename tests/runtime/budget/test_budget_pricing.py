"""Prices and exact cost arithmetic."""

from __future__ import annotations

from decimal import Decimal

import pydantic
import pytest

from agentrt.protocols import Usage
from agentrt.runtime.budget._pricing import (
    ModelPrice,
    PriceTable,
    pico_to_decimal,
    usd_to_pico,
)
from agentrt.runtime.kernel._errors import UnknownModelError


def test_prices_from_config_become_exact_per_token_rates() -> None:
    table = PriceTable.model_validate(
        {
            "models": {
                "small": {
                    "prompt_usd_per_mtok": 0.15,
                    "completion_usd_per_mtok": 0.6,
                    "cached_prompt_usd_per_mtok": 0.075,
                },
                "large": {"prompt_usd_per_mtok": "3", "completion_usd_per_mtok": "15"},
            }
        }
    )
    small = table.rates("small")
    assert (small.prompt, small.cached_prompt, small.completion) == (150_000, 75_000, 600_000)
    large = table.rates("large")
    assert large.cached_prompt == large.prompt == 3_000_000

    usage = Usage(prompt_tokens=1234, completion_tokens=567, cached_prompt_tokens=1000)
    pico = table.cost_pico("small", usage)
    exact = (
        Decimal(234) * Decimal("0.15") + Decimal(1000) * Decimal("0.075") + 567 * Decimal("0.6")
    ) / 10**6
    assert pico_to_decimal(pico) == exact
    assert table.cost_usd("small", usage) == float(exact)


def test_cached_tokens_beyond_prompt_are_capped() -> None:
    rates = ModelPrice(
        prompt_usd_per_mtok=Decimal(2),
        completion_usd_per_mtok=Decimal(4),
        cached_prompt_usd_per_mtok=Decimal(1),
    ).rates()
    over = Usage(prompt_tokens=10, completion_tokens=0, cached_prompt_tokens=50)
    assert rates.cost_pico(over) == 10 * rates.cached_prompt


def test_prices_with_too_many_decimals_or_negative_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError, match="more than 6 decimal places"):
        ModelPrice.model_validate(
            {"prompt_usd_per_mtok": "0.0000001", "completion_usd_per_mtok": 1}
        )
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 0"):
        ModelPrice.model_validate({"prompt_usd_per_mtok": -1, "completion_usd_per_mtok": 1})
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        ModelPrice.model_validate(
            {"prompt_usd_per_mtok": 1, "completion_usd_per_mtok": 1, "input": 2}
        )


def test_unknown_model_names_the_known_ones_unless_a_default_is_set() -> None:
    table = PriceTable.model_validate(
        {"models": {"a": {"prompt_usd_per_mtok": 1, "completion_usd_per_mtok": 1}}}
    )
    with pytest.raises(UnknownModelError, match=r"'b'.*known: a"):
        table.rates("b")
    assert PriceTable.free().cost_pico("anything", Usage(prompt_tokens=10**6)) == 0


def test_usd_to_pico_rounds_down() -> None:
    assert usd_to_pico(0.1) == 10**11
    assert usd_to_pico(Decimal("0.0000000000019")) == 1
    assert usd_to_pico(2.5) == 2_500_000_000_000
