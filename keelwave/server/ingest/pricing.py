"""What a model call cost, when the client did not say.

Token fields follow one convention whatever the provider (the SDK adapters
translate into it):

* ``input_tokens`` counts every input token, cached ones included;
  ``cache_read_tokens`` is the part of them served from a prompt cache;
* ``output_tokens`` counts every output token, reasoning included;
  ``reasoning_tokens`` is the part of them spent thinking.

So a call costs ``(input - cached) × input + cached × cached_input +
output × output`` (per million tokens), plus the difference for reasoning
tokens when a model prices them apart. Models are matched by name, longest
known prefix first, so ``gpt-4o-mini-2024-07-18`` is priced as
``gpt-4o-mini``, not ``gpt-4o``; provider prefixes such as ``openai/`` or
``models/`` are ignored. Unknown models cost ``null``, not zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path


class PriceTableError(ValueError):
    """A price file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    output: float
    cached_input: float | None = None
    reasoning: float | None = None


class PriceTable:
    def __init__(self, prices: dict[str, Price]) -> None:
        self._prices = prices
        # Longest names first, so the most specific prefix wins.
        self._by_length = sorted(prices, key=len, reverse=True)

    @classmethod
    def load(cls, override: Path | None = None) -> PriceTable:
        shipped = json.loads(files("keelwave.server.ingest").joinpath("prices.json").read_text())
        prices = _parse(shipped, "the shipped price table")
        if override is not None:
            try:
                data = json.loads(Path(override).read_text())
            except (OSError, ValueError) as error:
                raise PriceTableError(f"cannot read price file {override}: {error}") from None
            prices.update(_parse(data, str(override)))
        return cls(prices)

    def find(self, model: str) -> Price | None:
        name = model.strip().lower().rsplit("/", 1)[-1]
        if name in self._prices:
            return self._prices[name]
        for known in self._by_length:
            if name.startswith(known):
                return self._prices[known]
        return None

    def cost(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> float | None:
        price = self.find(model)
        if price is None:
            return None
        cached = min(cache_read_tokens, input_tokens)
        cached_rate = price.cached_input if price.cached_input is not None else price.input
        total = (input_tokens - cached) * price.input + cached * cached_rate
        total += output_tokens * price.output
        if price.reasoning is not None:
            total += min(reasoning_tokens, output_tokens) * (price.reasoning - price.output)
        return total / 1_000_000


def _parse(data: object, source: str) -> dict[str, Price]:
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise PriceTableError(f'{source}: expected {{"models": {{"<model>": {{...}}}}}}')
    prices = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or not {"input", "output"} <= entry.keys():
            raise PriceTableError(f"{source}: model {name!r} needs 'input' and 'output' prices")
        try:
            prices[name.lower()] = Price(
                input=float(entry["input"]),
                output=float(entry["output"]),
                cached_input=_optional(entry.get("cached_input")),
                reasoning=_optional(entry.get("reasoning")),
            )
        except (TypeError, ValueError):
            raise PriceTableError(f"{source}: prices of {name!r} must be numbers") from None
    return prices


def _optional(value: object) -> float | None:
    return None if value is None else float(value)
