"""What the tokens cost: a price table the operator gives (`--prices FILE`), applied to usage.

    {"currency": "USD",
     "models": {"gpt-4o": {"input_per_mtok": 2.5, "cached_input_per_mtok": 1.25, "output_per_mtok": 10}}}

Prices are per million tokens, by the model name the requests carry. A
usage's cost is its uncached prompt tokens at `input_per_mtok`, its cached
ones (`cached_prompt_tokens`) at `cached_input_per_mtok` (the input price
when not given), and its completion tokens at `output_per_mtok`; it is
kept in millionths of the currency (`cost_micros`, an integer, so sums are
exact), and is unknown (null) for a model the table does not name or a
usage without token counts. A malformed file is refused (`BadPrices`)
before anything is read or written.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn.events.errors import InputError

#: the largest price per million tokens taken (a typo guard)
MAX_PRICE = 100_000.0


class BadPrices(InputError):
    """A price table that cannot be used: unreadable, not of the shape above, or a negative price."""


class ModelPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None


class Prices(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    models: dict[str, ModelPrice]
    currency: str = "USD"

    def __post_init__(self) -> None:
        for model, price in self.models.items():
            for name in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok"):
                value = getattr(price, name)
                if value is not None and not 0 <= value <= MAX_PRICE:
                    raise BadPrices(f"model {model!r}: {name} must be within 0..{MAX_PRICE:g}, not {value}")

    def cost_micros(
        self, model: str | None, prompt: int | None, cached: int | None, completion: int | None
    ) -> int | None:
        """The usage's cost in millionths of the currency; None when unknown (see the module doc)."""
        price = self.models.get(model or "")
        if price is None or (prompt is None and completion is None):
            return None
        cached = min(cached or 0, prompt or 0)
        cached_price = (
            price.cached_input_per_mtok if price.cached_input_per_mtok is not None else price.input_per_mtok
        )
        total = ((prompt or 0) - cached) * price.input_per_mtok
        total += cached * cached_price + (completion or 0) * price.output_per_mtok
        return round(total)  # (tokens x price per million) is already in millionths


def load_prices(path: str | Path) -> Prices:
    """The price table at `path` (`BadPrices` when it cannot be used)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadPrices(f"cannot read the price table {path}: {exc.strerror or exc}") from None
    try:
        return msgspec.json.decode(data, type=Prices)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadPrices(f"the price table {path} is not of the documented shape: {exc}") from None
