"""Three priced tiers the routing tests choose among: small, mid and large
(prompt and completion dollars a million tokens: 0.1/0.4, 1/4, 3/15)."""

from __future__ import annotations

from decimal import Decimal

from agentrt.runtime.budget._pricing import ModelPrice, PriceTable
from agentrt.runtime.routing._tiers import Tier


def _price(prompt: str, completion: str) -> ModelPrice:
    return ModelPrice(
        prompt_usd_per_mtok=Decimal(prompt), completion_usd_per_mtok=Decimal(completion)
    )


PRICES = PriceTable(
    models={
        "m-small": _price("0.1", "0.4"),
        "m-mid": _price("1", "4"),
        "m-large": _price("3", "15"),
    }
)
TIERS = [Tier("small", "m-small"), Tier("mid", "m-mid"), Tier("large", "m-large")]
