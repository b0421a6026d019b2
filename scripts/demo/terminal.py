"""The demo's report on a terminal: the sessions table, the verdict, and the commands to audit the store."""

from __future__ import annotations

import shlex
from typing import Any

from rich.text import Text

from cairn import _console
from cairn.demo.agent import FALLBACK_SESSION, REACTIVE_SESSION


def _checkpoint_cell(checkpoints: list[dict[str, Any]]) -> str:
    """One line per checkpoint: trigger/strategy, tokens before and after, and the signed change."""
    if not checkpoints:
        return "-"
    return "\n".join(
        f"{c['trigger']}/{c['strategy']} {c['source_tokens']:,}->{c['replacement_tokens']:,} "
        f"({-c['reduction']:+.0%})"
        for c in checkpoints  # a change, signed: never "--22%"
    )


def _tokens_cell(report: dict[str, Any]) -> str:
    """Provider-reported tokens: `unknown` when no response reported usage, `≥` when some did not."""
    tokens = report["tokens"]
    if tokens is None:
        return "unknown"
    return f"≥{tokens:,}" if report["responses_without_usage"] else f"{tokens:,}"


def _figure(value: Any) -> str:
    return "unknown" if value is None else f"{value:,}"


def _turn_numbers(turns: list[int]) -> str:
    """`13`, `13-14`, `13, 15`: the turn numbers of one reason, runs collapsed."""
    runs: list[list[int]] = []
    for turn in sorted(turns):
        if runs and turn == runs[-1][-1] + 1:
            runs[-1].append(turn)
        else:
            runs.append([turn])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def problem_lines(report: dict[str, Any]) -> list[str]:
    """One line per session and reason for every turn of this run that did not complete."""
    lines: list[str] = []
    for r in report["reports"]:
        by_reason: dict[str, list[int]] = {}
        for problem in r["problems"]:
            by_reason.setdefault(problem["reason"], []).append(problem["turn"])
        for reason, turns in by_reason.items():
            which = f"turn {turns[0]}" if len(turns) == 1 else f"turns {_turn_numbers(turns)}"
            lines.append(f"{r['session']} {which}: {reason}")
    return lines


#: one line of the report under the table, and its style ("" for none)
Line = tuple[str, str]


def render(report: dict[str, Any]) -> None:
    """The report on stdout: the sessions table, notes, the verdict, then the commands to audit the store."""
    console = _console.console()
    console.print(_sessions_table(report))
    for line, style in [*_notes(report), *_verdict(report), ("", ""), *_audit(report)]:
        # never parsed as markup (it may quote the log); one line each: the terminal wraps it
        console.print(_console.text(line, style), soft_wrap=True)


def _sessions_table(report: dict[str, Any]) -> Any:
    """One row per session, from its log after reopening the store."""
    from rich.table import Table

    table = Table(title="sessions (from the log, after reopening the store)")
    for column in (
        "session",
        "turns",
        "this run",
        "requests",
        "tokens",
        "hand-offs",
        "checkpoints (reduction)",
        "failures",
        "replay",
    ):
        table.add_column(column)
    for r in report["reports"]:
        failures = ", ".join(r["failures"]) or "-"
        if r["provider_errors"]:
            failures += f" ({r['provider_errors']} provider errors)"
        this_run = f"{r['completed']}/{r['sent']} completed"
        table.add_row(
            *(_console.text(cell) for cell in (r["session"], r["turns"])),
            _console.text(this_run, "" if r["completed"] == r["sent"] else "red"),
            *(_console.text(cell) for cell in (r["requests"], _tokens_cell(r), r["handoffs"])),
            Text("\n".join(map(_console.printable, _checkpoint_cell(r["checkpoints"]).split("\n")))),
            _console.text(failures),
            _console.text("identical", "green") if r["replayed"] else _console.text("DIFFERS", "red"),
        )
    return table


def _notes(report: dict[str, Any]) -> list[Line]:
    """What the table's figures mean where it is not obvious: the tokens, the endpoint, the CPUs."""
    lines: list[Line] = []
    if any(r["tokens"] is None or r["responses_without_usage"] for r in report["reports"]):
        lines.append(
            (
                "tokens: as the provider reported them; unknown: it reported no usage, ≥: some "
                "responses came without usage",
                "",
            )
        )
    if report.get("provider", "scripted") != "scripted":  # an endpoint: OpenAI-compatible or Anthropic
        observed = ", ".join(f"{name} {_figure(value)}" for name, value in report["observed"].items())
        lines.append(
            (
                f"Endpoint {report['endpoint']}, model {report['model']}, context window "
                f"{report['context_window']:,}: {observed}.",
                "",
            )
        )
    if report.get("placement") == "one-cpu":
        lines.append(
            (
                f"The host's threads ran on CPU {report['cpu']}, batch-scheduled (CAIRN_CPU=off "
                "leaves them to the OS).",
                "",
            )
        )
    elif report.get("placement") == "batch":
        lines.append(("The host's threads were batch-scheduled on every CPU (CAIRN_CPU=batch).", ""))
    return lines


def _verdict(report: dict[str, Any]) -> list[Line]:
    """What the run did, the turns that did not complete, what was not seen, and whether it is healthy."""
    seen = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in report["seen"].items())
    lines: list[Line] = [
        (
            f"{report['sessions']} sessions x {report['turns_per_session']} turns"
            f" in {report['run_seconds']} s"
            f" ({report['continued_sessions']} continued from an earlier run):"
            f" {report['turns_completed']} of "
            f"{report['turns_sent']} turns completed; reopened the store: "
            f"{report['replayed_identically']}/{report['sessions']} sessions replayed to the same state "
            f"and next request. Seen: {seen}.",
            "",
        )
    ]
    problems = problem_lines(report)
    if problems:
        lines.append(("Turns of this run that did not complete:", "red"))
        lines += [(f"  {line}", "") for line in problems]
    if not all(report["seen"].values()) and report.get("provider", "scripted") != "scripted":
        lines.append(
            (
                "Not every session crossed the hand-off band and compacted: run more turns (--turns), or a "
                "smaller CAIRN_CONTEXT_WINDOW; the table shows what each session did.",
                "",
            )
        )
    elif not all(report["seen"].values()):
        lines.append(
            (
                f"Not everything was seen: the fallback happens in demo-{FALLBACK_SESSION}, the reactive "
                f"recovery in demo-{REACTIVE_SESSION}, and the first compactions after about 6 turns; "
                "run with the defaults (8 sessions, 12 turns) to see them all.",
                "",
            )
        )
    if report["ok"]:
        lines.append(("The run is healthy.", "green"))
    else:
        lines.append((f"The run is NOT healthy: {'; '.join(report['unhealthy_because'])}.", "red"))
    return lines


def _audit(report: dict[str, Any]) -> list[Line]:
    """The commands to audit the store, on the sessions of the injected faults where there are any."""
    endpoint = report.get("provider", "scripted") != "scripted"
    store = shlex.quote(report["store"])
    fallback = f"demo-{FALLBACK_SESSION}"
    reactive = f"demo-{REACTIVE_SESSION}"
    present = {r["session"] for r in report["reports"]}
    if endpoint or fallback not in present:  # no injected fault there: the first session will do
        fallback = "demo-1"
    if endpoint or reactive not in present:
        reactive = "demo-1"
    return [
        ("Audit what happened:", ""),
        *((f"  {command}", "") for command in audit_commands(store, fallback, reactive)),
    ]


def audit_commands(
    store: str, fallback: str = f"demo-{FALLBACK_SESSION}", reactive: str = f"demo-{REACTIVE_SESSION}"
) -> list[str]:
    """The `cairn` commands the demo prints to audit its store (`store` quoted for a shell), each starting
    with the program as the user can run it (`_console.cairn_program`)."""
    cairn = _console.cairn_program()
    return [
        f"{cairn} sessions --store {store}",
        f"{cairn} checkpoints {fallback} --store {store}",
        f"{cairn} log {fallback} --store {store} --kind compaction-failed --kind checkpoint-committed",
        f"{cairn} log {reactive} --store {store} --kind provider-error --kind checkpoint-committed",
        f"{cairn} log demo-1 --store {store} --kind handoff --kind context-slimmed",
        f"{cairn} context demo-1 --store {store}",
        f"{cairn} replay demo-1 --store {store}",
        f"{cairn} verify --store {store}",
    ]
