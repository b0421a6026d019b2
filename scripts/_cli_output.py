"""How the `cairn` commands print: tables, JSON, progress bars and warnings, all safe on a terminal."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from cairn import _console


def iso(ms: int) -> str:
    """Unix milliseconds as ISO 8601 UTC; as the number itself when no date has it."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def print_json(obj: Any) -> None:
    """One JSON document on one line; a terminal cannot act on anything in it (`_console.json_line`)."""
    sys.stdout.write(_console.json_line(msgspec.json.encode(obj)) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich on a terminal, aligned plain text otherwise.

    Every cell is shown through `_console.printable` (control characters
    escaped) and, on a terminal, as a rich `Text` (never parsed as markup):
    cells carry conversation text.
    """
    cells = [[_console.printable(cell) for cell in row] for row in rows]
    if sys.stdout.isatty():
        from rich.table import Table

        table = Table(title=_console.text(title))
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in cells:
            table.add_row(*(_console.text(cell) for cell in row))
        _console.console().print(table)
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def warn(message: str) -> None:
    """`cairn: message` on stderr, control characters escaped."""
    print(f"cairn: {_console.printable(message)}", file=sys.stderr)


@contextlib.contextmanager
def progress_bar(
    label: str, enabled: bool, *, counting: str = "bytes"
) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback (done, total) drawing a bar on a terminal, else None.

    `counting`: `bytes` (shown as sizes) or `items` (shown as `done/total`).
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn() if counting == "bytes" else MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def clip(text: str, width: int = 70) -> str:
    """`text` on one line (whitespace runs as one space), cut with `…` to at most `width` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
