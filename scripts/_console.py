"""The rich console every cairn command prints tables with."""

from __future__ import annotations

import sys

from rich.console import Console

#: width used when the output is not a terminal (a pipe, a file, CI logs), where
#: rich would otherwise fold every table into 80 columns
PIPE_WIDTH = 160


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)
