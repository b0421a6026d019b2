"""The rich console every cairn command prints tables with, and the escaping of what it prints.

Text that came from a conversation (messages, tool output, provider errors,
workspace paths, model names) reaches a terminal only through `printable`
(plain output), `text` (rich cells and lines: never parsed as markup or
emoji codes) or `json_line` (JSON): a terminal is never handed a control
sequence it could act on (ESC, BEL, CR, backspace, C1 controls such as
CSI U+009B, bidirectional overrides, line separators), and rich markup such
as `[bold red]` is shown as written.
"""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.text import Text

#: width used when the output is not a terminal (a pipe, a file, CI logs), where
#: rich would otherwise fold every table into 80 columns
PIPE_WIDTH = 160

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}  # as repr() spells them; the others as \\xHH
_NON_ASCII = re.compile(r"[^\x20-\x7e]")


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)


def _escape(char: str) -> str:
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """`str(value)` with every character Python calls non-printable shown as an escape.

    Non-printable (`str.isprintable`): control characters (C0, DEL, C1),
    format characters (bidirectional overrides and isolates, zero-width
    marks), line and paragraph separators, spaces other than the ASCII
    space, private-use and unassigned code points. They become `\\n`, `\\t`,
    `\\x1b`, `\\u202e`, ... so the terminal shows them instead of acting on them.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def text(value: object, style: str = "") -> Text:
    """A rich `Text` of `printable(value)`: rich prints it as it is (no markup, no emoji codes)."""
    return Text(printable(value), style=style)


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a code point outside the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_line(encoded: bytes | str) -> str:
    """A JSON document as one line a terminal cannot act on; it decodes to the same value.

    JSON encoders escape C0 controls but pass DEL, C1 controls, bidirectional
    overrides and line separators through as they are; those (every
    character Python calls non-printable) become `\\uXXXX` escapes. Such
    characters can only occur inside strings, where an escape means the same.
    """
    line = encoded.decode() if isinstance(encoded, bytes) else encoded
    if line.isascii() and line.isprintable():
        return line
    return _NON_ASCII.sub(_json_escape, line)


def cairn_program() -> str:
    """How to run this cairn from the current folder, as a shell word: `cairn` when that is the one on
    PATH, else the path of this environment's `cairn` script (`.venv/bin/cairn` for whoever followed
    the README without activating the venv), else `python -m cairn.cli` with this interpreter.
    Commands the demos print for the user to run next start with it, so they run as printed."""
    import os
    import shlex
    import shutil
    from pathlib import Path

    script = Path(sys.executable).parent / "cairn"
    on_path = shutil.which("cairn")
    if on_path is not None and script.exists() and Path(on_path).resolve() == script.resolve():
        return "cairn"
    if script.exists():
        try:
            shown = os.path.relpath(script)
        except ValueError:  # another drive (Windows)
            shown = str(script)
        shown = shown if os.sep in shown else f".{os.sep}{shown}"
        return shlex.quote(shown if not shown.startswith("..") else str(script))
    return f"{shlex.quote(sys.executable)} -m cairn.cli"
