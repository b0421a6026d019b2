"""Cost from a price table the operator gives (issue 27): `--prices FILE` for `cairn export` and `cairn
report`, checked against the usage lines of the every-kind store; bad tables refused before anything
is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import cli
from cairn.audit.prices import BadPrices, Prices, load_prices
from cairn.events.kinds import Request, Usage
from cairn.store import Journal
from tests.audit.conftest import BROKEN
from tests.audit.test_export import sql, t
from tests.audit.test_report import parse

#: the demo's model, priced; the every-kind store's other sessions use models left unpriced
TABLE = {
    "currency": "EUR",
    "models": {
        "scripted-coder": {"input_per_mtok": 2.5, "cached_input_per_mtok": 1.25, "output_per_mtok": 10}
    },
}


def test_a_usage_costs_its_uncached_cached_and_completion_tokens_at_their_prices() -> None:
    prices = Prices(models={"m": load_prices_from(TABLE).models["scripted-coder"]})
    assert prices.cost_micros("m", 1_000, 200, 500) == 800 * 2.5 + 200 * 1.25 + 500 * 10 == 7_250
    assert prices.cost_micros("m", 1_000, None, None) == 2_500  # no cache reads, no completion count
    assert prices.cost_micros("other", 1_000, 0, 500) is None  # a model the table does not name
    assert prices.cost_micros("m", None, None, None) is None  # no counts at all


def load_prices_from(table: dict[str, Any]) -> Prices:
    """The table as `load_prices` reads it from a file."""
    return msgspec.convert(table, Prices)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"models": {"m": {"input_per_mtok": -1, "output_per_mtok": 1}}}),
        json.dumps({"models": {"m": {"input_per_mtok": 1}}}),  # no output price
        json.dumps({"models": {"m": {"input_per_mtok": 1, "output_per_mtok": 1, "typo": 3}}}),
        json.dumps({"model": {}}),
    ],
)
def test_a_table_not_of_the_documented_shape_is_refused_before_anything_is_written(
    text: str, tmp_path: Path, pristine: Path
) -> None:
    (tmp_path / "prices.json").write_text(text)
    with pytest.raises(BadPrices):
        load_prices(tmp_path / "prices.json")
    out = tmp_path / "out"
    argv = ["export", "--store", str(pristine), "--format", "csv", "--to", str(out), "--prices"]
    assert cli.main([*argv, str(tmp_path / "prices.json")]) == 2
    assert (
        cli.main(
            ["report", "--store", str(pristine), "--out", str(out), "--prices", str(tmp_path / "prices.json")]
        )
        == 2
    )
    assert not out.exists()


def _expected(pristine: Path) -> dict[str, tuple[int, int]]:
    """Per session: the cost of its priced answers in micros, and how many answers were not priced."""
    prices = load_prices_from(TABLE)
    out: dict[str, tuple[int, int]] = {}
    with Journal.open(pristine, readonly=True) as journal:
        for summary in journal.sessions():
            if summary.sid == BROKEN:
                continue
            models: dict[str, str] = {}
            cost = unpriced = 0
            for record in journal.read(summary.sid):
                event = record.event
                if isinstance(event, Request):
                    models[event.request_id] = event.model
                elif isinstance(event, Usage):
                    each = prices.cost_micros(
                        models.get(event.request_id),
                        event.prompt_tokens,
                        event.cached_prompt_tokens,
                        event.completion_tokens,
                    )
                    cost, unpriced = (cost + each, unpriced) if each is not None else (cost, unpriced + 1)
            out[summary.sid] = (cost, unpriced)
    return out


def test_the_export_and_the_report_cost_each_answer_by_its_requests_model(
    pristine: Path, tmp_path: Path
) -> None:
    (tmp_path / "prices.json").write_text(json.dumps(TABLE))
    expected = _expected(pristine)
    assert expected["demo-1"][0] > 0 and expected["demo-1"][1] == 0
    out = tmp_path / "tables"
    cli.main(
        [
            "export",
            "--store",
            str(pristine),
            "--format",
            "parquet",
            "--to",
            str(out),
            "--prices",
            str(tmp_path / "prices.json"),
        ]
    )
    rows = sql(
        f"select sid, sum(cost_micros), count(*) - count(cost_micros) from {t(out, 'usage')} group by sid"
    )
    assert {sid: (int(cost or 0), int(left)) for sid, cost, left in rows} == {
        sid: value for sid, value in expected.items() if sid in {r[0] for r in rows}
    }
    report = tmp_path / "report"
    cli.main(
        ["report", "--store", str(pristine), "--out", str(report), "--prices", str(tmp_path / "prices.json")]
    )
    page = parse(report / "index.html")
    totals = {row[0]: row[1] for row in page.tables["totals"]}
    micros = sum(cost for cost, _ in expected.values())
    left = sum(n for _, n in expected.values())
    assert totals["cost"].startswith(f"{micros / 1e6:,.4f} EUR")
    assert (f"; {left:,} answers of models" in totals["cost"]) == (left > 0)
    costs = {row["session"]: row["cost"] for row in page.rows("sessions")}
    assert costs["demo-1"] == f"{expected['demo-1'][0] / 1e6:,.4f}"
