"""`cairn bench`: every benchmark of the project, as ratios measured in one run.

Usage: python -m cairn.bench [--quick] [--json] [--only store,context,compaction,turns,cluster]
Exit 0 when every figure with a target met it, 1 otherwise.

The `cluster` suite starts its own 3-node NATS cluster and two `cairn serve`
hosts (the `cluster` extra; about 75 s, 35 s with --quick); without the
extra it reports `cluster.unavailable` and nothing else.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from cairn import _console

Figure = dict[str, Any]


def figure(
    name: str, value: Any, unit: str, target: str | None = None, met: bool | None = None, detail: str = ""
) -> Figure:
    """One reported number: what, how much, against which target, and whether it was met."""
    return {"name": name, "value": value, "unit": unit, "target": target, "met": met, "detail": detail}


#: suite name -> module with `run(quick: bool) -> list[dict]`
SUITES = {
    "store": "cairn.bench.store",
    "context": "cairn.bench.context",
    "respawn": "cairn.bench.respawn",
    "compaction": "cairn.bench.compaction",
    "turns": "cairn.bench.turns",
    "cluster": "cairn.bench.cluster",
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
        for item in module.run(quick):
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


def main(argv: Sequence[str] | None = None, *, suite: str | None = None) -> int:
    """`cairn bench` (or, given `suite`, `python -m cairn.bench.<suite>`, that suite alone).

    Exit 0 when every figure with a target met it, 1 otherwise.
    """
    prog = "cairn bench" if suite is None else f"python -m cairn.bench.{suite}"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (about a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    if suite is None:
        suites = ",".join(SUITES)
        parser.add_argument("--only", default=suites, help=f"comma-separated suites: {suites}")
    args = parser.parse_args(argv)
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
    return 0 if report["all_met"] else 1
