"""The live view of a run on a terminal: what each session is doing, redrawn until the clients end."""

from __future__ import annotations

import threading
import time
from typing import Any

from cairn import _console
from cairn.demo.clients import Live


def show_progress(
    threads: list[threading.Thread], lives: dict[str, Live], lock: threading.Lock, started: float
) -> None:
    """Redraw the table on stderr eight times a second until every client thread has ended."""
    from rich.console import Console
    from rich.live import Live as RichLive

    console = Console(stderr=True)
    with RichLive(console=console, refresh_per_second=8, transient=False) as view:
        while any(thread.is_alive() for thread in threads):
            view.update(_progress_table(lives, lock, time.perf_counter() - started))
            threads[0].join(0.125)
        view.update(_progress_table(lives, lock, time.perf_counter() - started))


def _progress_table(lives: dict[str, Live], lock: threading.Lock, elapsed: float) -> Any:
    """What each session is doing now (`lives`, read under the clients' `lock`), `elapsed` s into the run."""
    from rich.table import Table

    table = Table(title=f"cairn demo: {len(lives)} sessions ({elapsed:.1f} s)")
    for column in ("session", "turn", "now", "requests", "checkpoints", "streamed chars", "not completed"):
        table.add_column(column)
    with lock:
        for sid, live in lives.items():
            style = ("green" if not live.failed else "red") if live.done else ""
            table.add_row(
                *(
                    _console.text(cell)
                    for cell in (
                        sid,
                        f"{live.turn}/{live.of}",
                        live.doing,
                        live.requests,
                        live.checkpoints,
                        f"{live.chars:,}",
                        live.failed,
                    )
                ),
                style=style,
            )
    return table
