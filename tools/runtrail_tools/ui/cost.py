"""What a run cost, from the operator's price table: model → input/output price per million
tokens, in a JSON or TOML file (``--price-table``)::

    currency = "USD"
    [models."gpt-4o"]
    input = 2.5
    output = 10.0

A captured model ID matches its table entry exactly, else the longest entry it starts with
(``gpt-4o-2024-08-06`` is priced as ``gpt-4o``): providers answer with dated IDs. A node
with no matching price or no token counts has no cost, and the run's total says how many such
nodes it leaves out, so a partial sum is never shown as the whole.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail.capture.record import NodeIoRecord

PER = 1_000_000


class PriceTableError(ValueError):
    """The price table cannot be read or is not model → {input, output}."""


@dataclass(frozen=True)
class Price:
    input_per_m: float
    output_per_m: float


@dataclass(frozen=True)
class RunCost:
    total: float
    priced: int
    #: MODEL nodes left out of the total (no price for their model, or no token counts)
    unpriced: int


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PriceTableError(f"{where} is not a price (a number ≥ 0 per 1M tokens)")
    return float(value)


@dataclass(frozen=True)
class PriceTable:
    currency: str
    prices: dict[str, Price]

    @classmethod
    def load(cls, path: Path) -> PriceTable:
        """Read ``path`` (TOML when it ends in ``.toml``, else JSON), every price checked."""
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (OSError, ValueError) as exc:
            raise PriceTableError(f"price table {path}: {exc}") from exc
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, dict):
            raise PriceTableError(f"price table {path}: no `models` table of model → prices")
        prices = {}
        for model, entry in models.items():
            where = f"price table {path}: {model}"
            if not isinstance(entry, dict):
                raise PriceTableError(f"{where}: expects {{input, output}} per 1M tokens")
            prices[str(model)] = Price(
                _number(entry.get("input"), f"{where}.input"),
                _number(entry.get("output"), f"{where}.output"),
            )
        return cls(str(data.get("currency") or "USD"), prices)

    def price_of(self, model_id: str | None) -> Price | None:
        if not model_id:
            return None
        if model_id in self.prices:
            return self.prices[model_id]
        matches = [name for name in self.prices if model_id.startswith(name)]
        return self.prices[max(matches, key=len)] if matches else None

    def node_cost(self, record: NodeIoRecord) -> float | None:
        """A MODEL node's cost; None when its model has no price or it has no token counts."""
        price = self.price_of(record.model_id) if record.node_type == "MODEL" else None
        if price is None or (record.input_tokens is None and record.output_tokens is None):
            return None
        spent_in = (record.input_tokens or 0) * price.input_per_m
        return (spent_in + (record.output_tokens or 0) * price.output_per_m) / PER

    def run_cost(self, records: Iterable[NodeIoRecord]) -> RunCost:
        total, priced, unpriced = 0.0, 0, 0
        for record in records:
            if record.node_type != "MODEL":
                continue
            cost = self.node_cost(record)
            if cost is None:
                unpriced += 1
            else:
                total, priced = total + cost, priced + 1
        return RunCost(total, priced, unpriced)

    def shown(self, amount: float) -> str:
        """An amount as the page shows it: enough digits for a fraction of a cent."""
        return f"{amount:.6f} {self.currency}"


def load_prices(path: Path | None) -> PriceTable | None:
    return None if path is None else PriceTable.load(path)
