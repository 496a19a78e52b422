"""Per-model prices and exact cost arithmetic (runtime floor).

Owns the price configuration (``ModelPrice``, ``PriceTable``: pydantic, user
facing) and the integer arithmetic that turns reported token usage into
money.  Money is counted in integer **pico-USD** (1e-12 USD): a price of
``P`` USD per million tokens is exactly ``P * 1e6`` pico-USD per token when
``P`` has at most six decimal places, which every real price list does.  So
sums over thousands of concurrent calls are exact and independent of their
order, and a cap comparison never suffers from float rounding.  Models a
table does not list may be priced from the ``genai-prices`` database (the
``prices`` extra), looked up once per model name.

Must not import agents, tools, aggregators or anything that does I/O.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Final, NamedTuple

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr

from agentrt.protocols._usage import Usage
from agentrt.runtime.kernel._errors import UnknownModelError

#: Pico-USD per USD.
PICO_PER_USD: Final = 10**12
#: Prices are given per this many tokens.
TOKENS_PER_PRICE_UNIT: Final = 10**6
_MAX_PRICE_DECIMALS: Final = 6


def _exact_in_pico(value: Decimal) -> Decimal:
    if not value.is_finite():
        raise ValueError(f"a price must be a finite number, got {value}")
    if value < 0:
        raise ValueError(f"a price cannot be negative, got {value}")
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent > _MAX_PRICE_DECIMALS:
        raise ValueError(
            f"price {value} USD per 1M tokens has more than {_MAX_PRICE_DECIMALS} decimal "
            "places; agentrt accounts exactly in 1e-12 USD per token"
        )
    return value


Price = Annotated[Decimal, AfterValidator(_exact_in_pico)]


def usd_to_pico(usd: float | Decimal) -> int:
    """Convert dollars to whole pico-USD, rounding down (so a cap converted
    this way is never looser than the one the user wrote)."""
    exact = Decimal(str(usd)) if isinstance(usd, float) else usd
    return int((exact * PICO_PER_USD).to_integral_value(rounding="ROUND_FLOOR"))


def pico_to_usd(pico: int) -> float:
    """Pico-USD as a float dollar amount (for reports and wire types)."""
    return pico / PICO_PER_USD


def usd_text(usd: float) -> str:
    """``usd`` for people: ``$0.0123`` (six decimals below a cent), or ``""``
    for nothing spent (no model of the run has a price: an unknown cost is
    not shown as ``$0``)."""
    if usd <= 0:
        return ""
    return f"${usd:.4f}" if usd >= 0.01 else f"${usd:.6f}"


def pico_to_decimal(pico: int) -> Decimal:
    """Pico-USD as an exact ``Decimal`` dollar amount."""
    return Decimal(pico).scaleb(-12)


class TokenRates(NamedTuple):
    """A model's prices as integer pico-USD per token (what the ledger uses)."""

    prompt: int
    cached_prompt: int
    completion: int

    def cost_pico(self, usage: Usage) -> int:
        """Exact cost of ``usage``.  Cached prompt tokens are billed at the
        cached rate; a server reporting more cached than prompt tokens is
        billed as if the whole prompt was cached (never below zero)."""
        cached = min(max(usage.cached_prompt_tokens, 0), usage.prompt_tokens)
        return (
            (usage.prompt_tokens - cached) * self.prompt
            + cached * self.cached_prompt
            + usage.completion_tokens * self.completion
        )

    def worst_case_pico(self, prompt_tokens: int, completion_tokens: int) -> int:
        """The most a call can cost: no prompt cache hit, every completion
        token it may generate."""
        return prompt_tokens * self.prompt + completion_tokens * self.completion


def _per_token_pico(price: Decimal) -> int:
    # Exact by the six-decimal validation: P USD / 1e6 tokens = P*1e6 pico/token.
    return int(price * (PICO_PER_USD // TOKENS_PER_PRICE_UNIT))


class ModelPrice(BaseModel):
    """What one model costs, in USD per one million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_usd_per_mtok: Price = Field(ge=0)
    """USD per 1M prompt (input) tokens that were not served from a cache."""

    completion_usd_per_mtok: Price = Field(ge=0)
    """USD per 1M completion (output) tokens, reasoning tokens included."""

    cached_prompt_usd_per_mtok: Price | None = Field(default=None, ge=0)
    """USD per 1M prompt tokens the server served from its prefix cache;
    ``None`` bills them at the full prompt price."""

    def rates(self) -> TokenRates:
        """The prices as exact integer pico-USD per token."""
        cached = self.cached_prompt_usd_per_mtok
        prompt = _per_token_pico(self.prompt_usd_per_mtok)
        return TokenRates(
            prompt=prompt,
            cached_prompt=prompt if cached is None else _per_token_pico(cached),
            completion=_per_token_pico(self.completion_usd_per_mtok),
        )


FREE: Final = ModelPrice(prompt_usd_per_mtok=Decimal(0), completion_usd_per_mtok=Decimal(0))


@functools.lru_cache(maxsize=1024)
def database_price(model: str) -> ModelPrice | None:
    """``model``'s current list price from the ``genai-prices`` database, or
    ``None`` when the database does not know the name (or the ``prices``
    extra is not installed).  Prices are rounded to six decimals (what
    agentrt accounts in); a tiered price takes its base tier."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return None
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        return None
    listed = info.get_prices(datetime.now(UTC))

    def usd(value: object) -> Decimal | None:
        base = getattr(value, "base", value)  # TieredPrices: the first tier
        if base is None:
            return None
        return Decimal(str(base)).quantize(Decimal("0.000001"))

    prompt, completion = usd(listed.input_mtok), usd(listed.output_mtok)
    if prompt is None or completion is None:
        return None
    return ModelPrice(
        prompt_usd_per_mtok=prompt,
        completion_usd_per_mtok=completion,
        cached_prompt_usd_per_mtok=usd(listed.cache_read_mtok),
    )


class PriceTable(BaseModel):
    """Prices of the models a run may call, by model name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, ModelPrice] = {}
    """Model name (as routed and requested) to its price."""

    default: ModelPrice | None = None
    """Price of any model not listed in ``models`` (nor found in the
    database); ``None`` makes an unpriced model an error (so a typo cannot
    make a model free)."""

    database: bool = False
    """Price models not in ``models`` from the ``genai-prices`` database
    (the ``prices`` extra) when it knows their name."""

    unpriced_free_uncapped: bool = False
    """A model with no price costs nothing in a ledger tree without a USD
    cap (its cost is unknown, shown as none), instead of being an error; a
    ``max_usd`` cap still needs every model it counts priced."""

    _rates: dict[str, TokenRates] = PrivateAttr(default_factory=dict)

    @classmethod
    def free(cls) -> PriceTable:
        """A table where every model costs nothing (local models, tests)."""
        return cls(default=FREE)

    def price(self, model: str) -> ModelPrice | None:
        """``model``'s price: listed, from the database, the default, or ``None``."""
        listed = self.models.get(model)
        if listed is not None:
            return listed
        found = database_price(model) if self.database else None
        return found if found is not None else self.default

    def rates(self, model: str) -> TokenRates:
        """The integer per-token rates of ``model``.

        Raises ``UnknownModelError`` naming the model and the known ones."""
        found = self._rates.get(model)
        if found is not None:
            return found
        price = self.price(model)
        if price is None:
            known = ", ".join(sorted(self.models)) or "none"
            where = " nor in the genai-prices database" if self.database else ""
            raise UnknownModelError(
                f"no price for model {model!r} in the price table{where} (known: {known}); "
                f'add [prices."{model}"] with prompt_usd_per_mtok and completion_usd_per_mtok '
                "to agentrt.toml (or PriceTable.models)"
            )
        found = self._rates[model] = price.rates()
        return found

    def cost_pico(self, model: str, usage: Usage) -> int:
        """Exact cost of ``usage`` on ``model`` in pico-USD."""
        return self.rates(model).cost_pico(usage)

    def cost_usd(self, model: str, usage: Usage) -> float:
        """Cost of ``usage`` on ``model`` in USD (float, for display)."""
        return pico_to_usd(self.cost_pico(model, usage))


#: What an unpriced model costs where no USD cap counts it.
UNPRICED_RATES: Final = TokenRates(prompt=0, cached_prompt=0, completion=0)


__all__ = [
    "FREE",
    "PICO_PER_USD",
    "UNPRICED_RATES",
    "ModelPrice",
    "PriceTable",
    "TokenRates",
    "database_price",
    "pico_to_decimal",
    "pico_to_usd",
    "usd_text",
    "usd_to_pico",
]
