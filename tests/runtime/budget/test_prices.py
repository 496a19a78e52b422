"""Prices from agentrt.toml and the genai-prices database: costs in USD and
``max_usd`` caps from the embedding API, the CLI, the daemon's REST API and MCP."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from agentrt.protocols import Budget
from agentrt.runtime.budget._pricing import (
    PICO_PER_USD,
    ModelPrice,
    PriceTable,
    database_price,
    usd_text,
)
from agentrt.runtime.cli._main import main
from agentrt.runtime.config._config_file import config_from_mapping, load_config
from agentrt.runtime.engine._runtime import Runtime
from agentrt.runtime.kernel._errors import ConfigError
from agentrt.testing import ScriptedBackend
from tests._support.configs import scripted_models, write_config
from tests._support.logs import warnings_logged

genai_prices = pytest.importorskip("genai_prices")

HOUSE_TOML = (
    scripted_models(["42"], backend="house", models=["house-model"])
    + """
[prices."house-model"]
prompt_usd_per_mtok = 2.5
completion_usd_per_mtok = 10
cached_prompt_usd_per_mtok = 1.25
"""
)
UNPRICED_TOML = scripted_models(["42"], backend="own", models=["nobody-prices-this-model"])


@pytest.fixture
def _warnings_logging() -> Iterator[None]:
    with warnings_logged():
        yield


def _expected_usd(price: ModelPrice, prompt: int, completion: int) -> Decimal:
    return (
        price.prompt_usd_per_mtok * prompt + price.completion_usd_per_mtok * completion
    ) / 1_000_000


@pytest.mark.anyio
async def test_a_toml_price_counts_the_cost_and_a_usd_cap_runs(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, HOUSE_TOML))
    price = config.runtime.prices["house-model"]
    assert price.cached_prompt_usd_per_mtok == Decimal("1.25")
    async with Runtime(config.runtime) as rt:
        result = await rt.run("what is 6*7?", budget=Budget(max_usd=0.5))
    assert result.status == "succeeded"
    usage = result.cost.usage
    assert usage.prompt_tokens > 0
    expected = _expected_usd(price, usage.prompt_tokens, usage.completion_tokens)
    assert Decimal(str(result.cost.usd)) == expected


@pytest.mark.anyio
async def test_a_known_model_name_is_priced_from_genai_prices() -> None:
    listed = database_price("gpt-4o-mini")
    assert listed is not None
    assert listed.prompt_usd_per_mtok > 0
    assert listed.completion_usd_per_mtok > listed.prompt_usd_per_mtok
    backend = ScriptedBackend(["42"], models=["gpt-4o-mini"], on_exhausted="repeat_last")
    async with Runtime(backends=[backend]) as rt:
        result = await rt.run("what is 6*7?", budget=Budget(max_usd=0.01))
    usage = result.cost.usage
    expected = _expected_usd(listed, usage.prompt_tokens, usage.completion_tokens)
    assert result.status == "succeeded"
    assert Decimal(str(result.cost.usd)) == expected
    assert usd_text(result.cost.usd).startswith("$0.0000")


@pytest.mark.anyio
async def test_a_usd_cap_on_a_model_nobody_prices_is_refused_naming_it() -> None:
    backend = ScriptedBackend(["42"], models=["nobody-prices-this-model"])
    async with Runtime(backends=[backend]) as rt:
        with pytest.raises(ConfigError, match="'nobody-prices-this-model'") as caught:
            await rt.run("hi", budget=Budget(max_usd=1.0))
        assert caught.value.where == "budget.max_usd"
        assert "[prices." in str(caught.value)
        assert backend.requests == []  # refused before any model call
        uncapped = await rt.run("hi")  # without a USD cap, it runs: its cost is unknown
    assert uncapped.status == "succeeded"
    assert uncapped.cost.usd == 0
    assert usd_text(uncapped.cost.usd) == ""


@pytest.mark.anyio
async def test_the_database_can_be_turned_off() -> None:
    backend = ScriptedBackend(["42"], models=["gpt-4o-mini"])
    async with Runtime({"price_database": False}, backends=[backend]) as rt:
        with pytest.raises(ConfigError, match="'gpt-4o-mini'"):
            await rt.run("hi", budget=Budget(max_usd=1.0))


def test_a_toml_price_beats_the_database_and_bad_prices_name_their_key() -> None:
    mine = ModelPrice(prompt_usd_per_mtok=Decimal(1), completion_usd_per_mtok=Decimal(2))
    table = PriceTable(models={"gpt-4o-mini": mine}, database=True)
    assert table.rates("gpt-4o-mini").prompt == PICO_PER_USD // 1_000_000
    with pytest.raises(ConfigError, match=r"prices\.m\.prompt_usd_per_mtok") as caught:
        config_from_mapping(
            {"prices": {"m": {"prompt_usd_per_mtok": -1, "completion_usd_per_mtok": 1}}},
            source="t.toml",
        )
    assert "t.toml" in str(caught.value)
    with pytest.raises(ConfigError, match=r"prices\.m\.completion"):
        config_from_mapping({"prices": {"m": {"prompt_usd_per_mtok": 1}}}, source="t.toml")


@pytest.mark.usefixtures("_warnings_logging")
def test_the_cli_takes_max_usd_and_prints_the_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, HOUSE_TOML))
    assert main(["run", "what is 6*7?", "--max-usd", "0.5", "--config", config]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("usage: ")
    assert ", $0.0" in last
    unpriced = str(tmp_path / "own.toml")
    Path(unpriced).write_text(UNPRICED_TOML)
    assert main(["run", "hi", "--max-usd", "0.5", "--config", unpriced]) == 2
    err = capsys.readouterr().err
    assert "'nobody-prices-this-model'" in err
    assert len(err.strip().splitlines()) == 1
