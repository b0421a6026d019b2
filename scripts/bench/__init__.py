"""`cairn bench`: every benchmark of the project, as ratios measured in one run.

Usage: cairn bench [--quick] [--json] [--explore] [--long] [--only SUITES] [--provider scripted|openai]

A suite is a module with `run(quick) -> list[Figure]` (and, where it
measures something judged against nothing, `explore(quick)`, run only with
`--explore`); it declares its measures and `Comparison`s, and
`_figure.compare` measures them in alternating pairs and judges them. Every
figure is judged against a target or marked explore (shown only with
`--explore`). Exit 0 when every judged
figure met its target, 1 otherwise; a suite that raises is reported as one
failed figure, `<suite>.error`, and the run goes on.

The default run is the suites in `DEFAULT`; the long ones (`LONG`) run only
when named with `--only` or with `--long`: `cluster` (its own 3-node NATS
cluster, the `cluster` extra), `model` (llama.cpp with SmolLM2, the `llm`
extra), `hosts` (10k live sessions in child processes), `audit` (stores of
250k and 1M events). `quality` runs its quick corpus in a default run and
its full one with `--long` or `--only quality`.
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
from typing import Any

import msgspec

from cairn import _console
from cairn.bench._figure import Comparison, Figure, compare, unavailable

__all__ = ["Comparison", "Figure", "compare", "guarded", "main", "run_suites"]

#: suite name -> module with `run(quick: bool) -> list[Figure]`; the default run, in order
DEFAULT = {
    "store": "cairn.bench.store",
    "context": "cairn.bench.context",
    "respawn": "cairn.bench.respawn",
    "compaction": "cairn.bench.compaction",
    "quality": "cairn.bench.quality",
    "turns": "cairn.bench.turns",
    "asyncloop": "cairn.bench.asyncloop",
    "http": "cairn.bench.http",
}
#: the long suites: only with `--only NAME` or `--long`
LONG = {
    "hosts": "cairn.bench.hosts",
    "audit": "cairn.bench.audit",
    "cluster": "cairn.bench.cluster",
    "model": "cairn.bench.model",
}
SUITES = {**DEFAULT, **LONG}
#: suites whose full run is long: quick in a default run, full with `--long` or `--only`
QUICK_BY_DEFAULT = frozenset({"quality"})


def suite_error(suite: str, exc: BaseException) -> Figure:
    """The figure a suite that raised leaves: a missed target, with the error and where it was raised."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ is not None else []
    at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    detail = f"{type(exc).__name__}: {exc}{at}"
    return Figure(f"{suite}.error", 0, "", "the suite runs to the end", False, detail)


def guarded(name: str, part: Callable[[], list[Figure]]) -> list[Figure]:
    """The figures of one part of a suite; a part that raises leaves `<name>.error` (a missed target)
    instead, so the suite's other parts still report."""
    try:
        return part()
    except Exception as exc:
        return [suite_error(name, exc)]


def exit_code(report: dict[str, Any]) -> int:
    """1 when a figure missed its target (`met` is False), else 0."""
    return 1 if any(f.get("met") is False for f in report["figures"]) else 0


def run_suites(
    names: Sequence[str], quick: bool, log: Any = None, *, explore: bool = False, full: Sequence[str] = ()
) -> dict[str, Any]:
    """Run the suites `names` in order; the report (`--json` prints it), with how many targets were met.

    Explore figures are left out unless `explore`; a suite in `QUICK_BY_DEFAULT` runs quick unless
    it is in `full`."""
    figures: list[Figure] = []
    started = time.perf_counter()
    for name in names:
        try:
            module = importlib.import_module(SUITES[name])
        except ImportError as exc:
            figures.append(unavailable(name, str(exc)))
            continue
        small = quick or (name in QUICK_BY_DEFAULT and name not in full)
        if log is not None:
            log(f"running {name} benchmarks{' (quick)' if small else ''} ...")
        try:
            items = list(module.run(small))
            if explore and hasattr(module, "explore"):
                items += module.explore(small)
        except Exception as exc:  # reported as a missed target; the next suite still runs
            items = [suite_error(name, exc)]
        figures += [msgspec.structs.replace(f, suite=name) for f in items if explore or not f.explore]
    checked = [f for f in figures if f.met is not None]
    return {
        "quick": quick,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": msgspec.to_builtins(figures),
        "targets": len(checked),
        "targets_met": sum(1 for f in checked if f.met),
        "all_met": all(f.met for f in checked),
    }


def render(report: dict[str, Any]) -> None:
    """The report as a table on stdout, then the targets met."""
    from rich.table import Table

    table = Table(title=f"cairn bench{' --quick' if report['quick'] else ''}")
    for column in ("figure", "value", "unit", "target", "met", "detail"):
        table.add_column(column, overflow="fold")
    for f in report["figures"]:
        met = {True: "[green]yes[/]", False: "[red]NO[/]", None: ""}[f["met"]]
        value = f"{f['value']:,}" if isinstance(f["value"], int | float) else str(f["value"] or "-")
        table.add_row(f["name"], value, f["unit"], f["target"] or "", met, f["detail"])
    console = _console.console()
    console.print(table)
    console.print(f"{report['targets_met']}/{report['targets']} targets met in {report['seconds']} s")
    missed = [f["name"] for f in report["figures"] if f["met"] is False]
    if missed:
        console.print(f"missed: {', '.join(missed)}")


def main(argv: Sequence[str] | None = None, *, suite: str | None = None) -> int:
    """`cairn bench` (or, given `suite`, `python -m cairn.bench.<suite>`, that suite alone).

    Exit 0 when every figure with a target met it, 1 otherwise.
    """
    prog = "cairn bench" if suite is None else f"python -m cairn.bench.{suite}"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (under 2 minutes by default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--explore", action="store_true", help="also show the figures judged against nothing")
    parser.add_argument(
        "--provider",
        choices=("scripted", "openai"),
        help="the quality suite's summarizer: scripted (offline, default) or openai (the CAIRN_* settings)",
    )
    if suite is None:
        parser.add_argument(
            "--long",
            action="store_true",
            help=f"also run the long suites ({', '.join(LONG)}) and the full quality corpus",
        )
        parser.add_argument(
            "--only",
            help=f"comma-separated suites: default {', '.join(DEFAULT)}; long, only when named or with "
            f"--long: {', '.join(LONG)}",
        )
    args = parser.parse_args(argv)
    if args.provider:
        os.environ["CAIRN_BENCH_PROVIDER"] = args.provider  # read by the quality suite
    named = suite if suite is not None else args.only
    if named is not None:
        names = [n.strip() for n in named.split(",") if n.strip()]
        full = names
    else:
        names = list(SUITES) if args.long else list(DEFAULT)
        full = names if args.long else []
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")
    log = None if args.json else (lambda text: print(text, file=sys.stderr))
    report = run_suites(names, args.quick, log, explore=args.explore, full=full)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return exit_code(report)
