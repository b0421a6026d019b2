"""`render_cluster`: the report of `cairn demo --cluster` as text, on stdout."""

from __future__ import annotations

from typing import Any

from cairn import _console


def _owners(report: dict[str, Any], key: str) -> str:
    by_host: dict[str, list[str]] = {}
    for sid, host in report[key].items():
        by_host.setdefault(host or "nobody", []).append(sid.removeprefix("demo-"))
    return "; ".join(f"{host}: {', '.join(sids)}" for host, sids in sorted(by_host.items()))


def _lines(report: dict[str, Any]) -> list[str]:
    """The report's lines, top to bottom. Long for a reason: one line per fact, in reading order."""
    ttl = report["lease_ttl_s"]
    node = report["node_stopped"]
    turns = report["client_turns"]
    logged = report["log_turns"]
    failover = report["failover_s"]
    lines = [
        f"cairn demo --cluster: {report['sessions']} sessions x {report['turns']} turns on 3 NATS nodes "
        f"and 3 hosts ({report['seconds']:.1f} s)",
        f"  lease TTL {ttl} s: the production default, renewed every {ttl / 3:.0f} s and held through a "
        "write stall of up to 8 s (a dead stream leader stalls writes 5-7 s); a failover takes about the TTL",
        "  owners before the kill (demo-N by host): " + _owners(report, "owners_before"),
        f"  SIGKILL {report['killed_host']}"
        + (" while it served a turn" if report["killed_while_serving"] else " (no turn of it seen open)"),
    ]
    for sid, move in sorted(report["moved"].items(), key=lambda item: int(item[0].rsplit("-", 1)[1])):
        lines.append(f"    {sid}: {move['from']} -> {move['to']} in {move['failover_s']:.2f} s")
    if failover["max"] is not None:
        within = "within" if report["failover_within_target"] else "NOT within"
        lines.append(
            f"  failover {failover['min']:.2f}-{failover['max']:.2f} s from the SIGKILL to the new owner's "
            f"first acknowledged event, {within} the target of TTL + 2 = {report['failover_target_s']} s"
        )
    stall = f"{node['stall_s']:.2f} s" if node["stall_s"] is not None else "no write after it"
    role = "the events stream's leader" if node["was_stream_leader"] else "a follower of the events stream"
    back = "started again after writes resumed" if node["restarted"] else "not started again"
    lines += [
        f"  node {node['name']} stopped (SIGTERM), {role}: writes stalled {stall}; {back}",
        "  owners at the end: " + _owners(report, "owners_after"),
        f"  turns (client): {turns['sent']} sent, {turns['completed_first_time']} completed, "
        f"{turns['interrupted_then_completed']} interrupted and completed when sent again, "
        f"{turns['not_completed']} not completed",
        f"  turns (log): {logged['started']} started, {logged['completed']} completed, "
        f"{logged['interrupted']} marked interrupted, {logged['failed']} failed, {logged['open']} left open",
    ]
    same = sum(report["replayed"].values())
    lines.append(
        f"  replay: {same}/{len(report['replayed'])} sessions load from their checkpoint to the state of a "
        "full replay, with the records the client was streamed"
    )
    for key in ("verify_nats", "export", "verify_export"):
        run = report[key]
        lines.append(f"  $ {run['command']}  -> exit {run['exit']}: {run['said']}")
    lines += [f"  note: {note}" for note in report["notes"]]
    lines.append(f"  the cluster is stopped; its log is exported to {report['export_dir']}. Next:")
    lines += [f"    {command}" for command in report["commands"]]
    if report["ok"]:
        lines.append(
            "OK: every turn completed or was marked interrupted, every session replayed, verify clean"
        )
    else:
        lines.append("FAILED:")
        lines += [f"  - {problem}" for problem in report["problems"]]
    return lines


def render_cluster(report: dict[str, Any]) -> None:
    """Print the report (see `_lines`)."""
    for line in _lines(report):
        print(_console.printable(line))
