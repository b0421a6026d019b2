"""The report of `cairn demo --cluster`: one JSON-able dict (what `--json` prints and `render_cluster` shows).

`client_turns` counts the turns as the client saw them (completed at the
first send, interrupted and completed when sent again, not completed);
`audit_commands` are the commands the user can run next, against the
export the demo wrote (the cluster itself is stopped when the demo ends).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from cairn import _console
from cairn.demo.cluster_clients import SessionRun
from cairn.demo.cluster_facts import SessionFacts
from cairn.demo.cluster_procs import CommandRun


def client_turns(runs: list[SessionRun]) -> tuple[dict[str, int], list[str]]:
    """Turn counts from the client's side, and one problem line per turn that never completed."""
    counts = {"sent": 0, "completed_first_time": 0, "interrupted_then_completed": 0, "not_completed": 0}
    problems: list[str] = []
    for run in runs:
        by_turn: dict[int, list[Any]] = {}
        for attempt in run.attempts:
            by_turn.setdefault(attempt.turn, []).append(attempt)
        for n, attempts in sorted(by_turn.items()):
            counts["sent"] += 1
            if attempts[0].ok:
                counts["completed_first_time"] += 1
            elif attempts[-1].ok:
                counts["interrupted_then_completed"] += 1
            else:
                counts["not_completed"] += 1
                problems.append(f"{run.sid} turn {n}: {attempts[-1].reason}")
    return counts, problems


def audit_commands(export_dir: Path, sid: str) -> list[str]:
    """What to run next, on the export (every one exits 0 on a healthy run)."""
    where = ["--store", str(export_dir)]
    cairn = _console.cairn_program()  # as the user can run it
    return [
        f"{cairn} {shlex.join(['sessions', *where])}",
        f"{cairn} {shlex.join(['log', sid, *where])}",
        f"{cairn} {shlex.join(['replay', sid, *where])}",
        f"{cairn} {shlex.join(['verify', *where])}",
    ]


def _command(run: CommandRun) -> dict[str, Any]:
    return {"command": shlex.join(["cairn", *run.args]), "exit": run.exit_code, "said": run.last_line}


def cluster_report(
    *,
    store: Path,
    sessions: int,
    turns: int,
    runs: list[SessionRun],
    facts: list[SessionFacts],
    faults: Any,
    hosts: dict[str, dict[str, Any]],
    nodes: list[dict[str, str]],
    verify: CommandRun,
    export: CommandRun,
    export_verify: CommandRun,
    export_dir: Path,
    problems: list[str],
    seconds: float,
) -> dict[str, Any]:
    # long: one dict literal, the report's JSON as `--json` prints it, key by key
    """The whole report (see the module doc); `ok` when `problems` is empty."""
    from cairn.demo.cluster import FAILOVER_TARGET_S, LEASE_TTL_S

    counts, _ = client_turns(runs)
    moved = {
        f.sid: {"from": faults.victim, "to": f.new_owner, "failover_s": f.failover_s}
        for f in facts
        if f.new_owner
    }
    times = [f.failover_s for f in facts if f.failover_s is not None]
    return {
        "mode": "cluster",
        "store": str(store),
        "sessions": sessions,
        "turns": turns,
        "lease_ttl_s": LEASE_TTL_S,
        "hosts": hosts,
        "nodes": nodes,
        "killed_host": faults.victim,
        "killed_while_serving": faults.victim_busy,
        "owners_before": {f.sid: f.owner_before for f in facts},
        "owners_after": {f.sid: f.owner_after for f in facts},
        "moved": moved,
        "failover_s": {"max": max(times, default=None), "min": min(times, default=None)},
        "failover_target_s": FAILOVER_TARGET_S,
        "failover_within_target": bool(times) and max(times) < FAILOVER_TARGET_S,
        "node_stopped": {
            "name": faults.node,
            "was_stream_leader": faults.node_was_leader,
            "stall_s": faults.stall_s,
            "restarted": faults.node_restarted,
        },
        "client_turns": counts,
        "log_turns": {
            "started": sum(f.turns_started for f in facts),
            "completed": sum(f.turns_completed for f in facts),
            "interrupted": sum(f.turns_interrupted for f in facts),
            "failed": sum(f.turns_failed_other for f in facts),
            "open": sum(f.turns_open for f in facts),
        },
        "replayed": {f.sid: f.replayed and f.client_agrees for f in facts},
        "verify_nats": _command(verify),
        "export": _command(export),
        "verify_export": _command(export_verify),
        "export_dir": str(export_dir),
        "commands": audit_commands(export_dir, facts[0].sid if facts else "demo-1"),
        "notes": faults.notes,
        "problems": problems,
        "seconds": round(seconds, 2),
        "ok": not problems,
    }
