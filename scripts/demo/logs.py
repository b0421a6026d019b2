"""The log records of a run (cairn's warnings, pykka's errors), held back from the live view."""

from __future__ import annotations

import logging


class HeldLogs(logging.Handler):
    """Log records of the run (cairn's warnings, pykka's errors), held back from the live view.

    Once the run is over they are shown one line each, without tracebacks, and
    alike ones (the same message template) once with a count. Installed on the
    root logger for the run only.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> HeldLogs:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def lines(self) -> list[str]:
        alike: dict[tuple[str, object], list[logging.LogRecord]] = {}
        for record in self.records:
            alike.setdefault((record.name, record.msg), []).append(record)
        lines = []
        for group in alike.values():
            first = group[0]
            line = first.getMessage()
            if first.exc_info and first.exc_info[1] is not None:
                line += f" ({type(first.exc_info[1]).__name__}: {first.exc_info[1]})"
            line = line.removeprefix("cairn: ") if line.startswith("cairn: ") else f"{first.name}: {line}"
            lines.append(line + (f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""))
        return lines
