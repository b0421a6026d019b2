"""What the bench reports and how a ratio is declared: `Figure`, `Comparison`, and `compare`, the one runner.

A suite declares its measures (named callables returning a rate or a time)
and the `Comparison`s between them; `compare` runs every measure once per
round in alternating order (`_measure.interleave`), under one `LoadMeter`,
and judges each comparison into a `Figure`. A figure is judged against a
target, or it is marked `explore` and shown only with `cairn bench
--explore`: constructing one that is neither raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from cairn.bench._measure import LoadMeter, Pairs, interleave

Value = int | float | str | None


class Figure(msgspec.Struct, frozen=True):
    """One reported number: what, how much, against which target, and whether it was met.

    `pairs` and `load` are the alternating pairs it came from and the
    machine's load while they ran (as `Pairs.as_dict`, `LoadMeter.as_dict`);
    `runs` any other series behind it. `explore` figures are judged against
    nothing and only shown with `--explore`.
    """

    name: str
    value: Value
    unit: str
    target: str | None = None
    met: bool | None = None
    detail: str = ""
    pairs: dict[str, Any] | None = None
    load: dict[str, Any] | None = None
    runs: dict[str, list[float]] | None = None
    suite: str = ""
    explore: bool = False

    def __post_init__(self) -> None:
        if (self.target is None or self.met is None) and not self.explore:
            raise ValueError(f"figure {self.name}: judged against a target, or marked explore")

    @classmethod
    def measured(
        cls,
        name: str,
        value: Value,
        unit: str,
        detail: str,
        load: LoadMeter,
        *,
        target: str | None = None,
        met: bool | None = None,
        explore: bool = False,
    ) -> Figure:
        """A figure measured under `load`: its detail ends with the machine's load, and it carries it."""
        return cls(
            name,
            value,
            unit,
            target,
            met,
            f"{detail}; {load.summary()}",
            load=load.as_dict(),
            explore=explore,
        )


def shown(name: str, value: Value, unit: str, target: str | None, met: bool | None, detail: str) -> Figure:
    """A figure judged where it has a target, else shown only with `--explore`."""
    return Figure(name, value, unit, target, met, detail, explore=target is None)


def unavailable(suite: str, why: str) -> Figure:
    """A suite that cannot run here (an extra not installed): shown, never failing the run."""
    return Figure(f"{suite}.unavailable", 0, "", detail=why, suite=suite, explore=True)


@dataclass(frozen=True)
class Comparison:
    """A ratio declared: `subject` against `baseline` (names of measures), judged at `target`.

    `better` says which way the measures go (`higher` for rates, `lower`
    for times); the ratio is always oriented so that above 1 means the
    subject did better (subject/baseline for rates, baseline/subject for
    times), and the figure's value is the median of the pairs' ratios.
    `target` is the least that median may be; `says` words the target when
    the ratio alone would read backwards. Without a target the comparison
    is `explore`. `scale` multiplies the pairs as printed (1000: s -> ms).
    """

    name: str
    baseline: str
    subject: str
    what: str
    target: float | None = None
    better: Literal["higher", "lower"] = "higher"
    says: str = ""
    fmt: str = ",.0f"
    scale: float = 1.0

    def pairs(self, values: dict[str, list[float]]) -> Pairs:
        return Pairs(
            [v * self.scale for v in values[self.baseline]],
            [v * self.scale for v in values[self.subject]],
            higher_is_better=self.better == "higher",
        )

    def judge(self, values: dict[str, list[float]], load: LoadMeter, detail: str = "") -> Figure:
        """The figure of this comparison over measured `values`; `detail` adds to what it says."""
        pairs = self.pairs(values)
        ratio = pairs.ratio
        target = None if self.target is None else (self.says or f">= {self.target:g}x")
        met = None if self.target is None else ratio >= self.target
        text = "; ".join(
            part
            for part in (
                self.what,
                detail,
                f"{self.baseline}->{self.subject}",
                pairs.describe(self.fmt),
                load.summary(),
            )
            if part
        )
        return Figure(
            self.name,
            round(ratio, 3),
            "x",
            target,
            met,
            text,
            pairs=pairs.as_dict(),
            load=load.as_dict(),
            explore=self.target is None,
        )


@dataclass(frozen=True)
class Compared:
    """What `compare` measured: the judged figures, every measure's values by name, and the load."""

    figures: list[Figure]
    values: dict[str, list[float]]
    load: LoadMeter


def compare(
    measures: Sequence[tuple[str, Callable[[], float]]], comparisons: Sequence[Comparison], rounds: int
) -> Compared:
    """Run `measures` once per round in alternating order (`interleave`) and judge `comparisons`.

    Any two measures of the list alternate which goes first from round to
    round; measures listed next to each other also run next to each other.
    """
    known = {name for name, _ in measures}
    for c in comparisons:
        missing = {c.baseline, c.subject} - known
        if missing:
            raise ValueError(f"comparison {c.name} names no measure {sorted(missing)}")
    with LoadMeter() as load:
        values = interleave(measures, rounds)
    return Compared([c.judge(values, load) for c in comparisons], values, load)
