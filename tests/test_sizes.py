"""Sizes (issue 24 point 6): no module over 450 lines, no function over 60, unless it says why.

A function says why with a comment as the first line of its body (before or
right after its docstring): `# long: <the reason>`. A module says why with
`# long: <the reason>` as the first comment line after its docstring. A
function's length runs from its `def` line to its last line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("actors", "events", "store", "scripts")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
REASON = "# long:"


def _modules() -> list[tuple[str, str]]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return found


def _says_why(lines: list[str], first: int, last: int) -> bool:
    """Whether a line in [first, last] (1-based) is a `# long:` comment with a reason after it."""
    for line in lines[first - 1 : last]:
        text = line.strip()
        if text.startswith(REASON) and text[len(REASON) :].strip():
            return True
    return False


def _module_says_why(tree: ast.Module, lines: list[str]) -> bool:
    body = tree.body
    after = (body[0].end_lineno or 0) if body and _is_doc(body[0]) else 0
    for line in lines[after:]:
        text = line.strip()
        if text:
            return text.startswith(REASON) and bool(text[len(REASON) :].strip())
    return False


def _is_doc(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _head_end(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The last line a `# long:` comment may be on: before the first statement after the docstring."""
    body = node.body
    if not _is_doc(body[0]):
        return body[0].lineno - 1
    return body[1].lineno - 1 if len(body) > 1 else body[0].end_lineno or body[0].lineno


def _oversized(name: str, text: str) -> list[str]:
    lines = text.splitlines()
    tree = ast.parse(text, filename=name)
    found = []
    if len(lines) > MAX_MODULE_LINES and not _module_says_why(tree, lines):
        found.append(f"{name}: {len(lines)} lines (over {MAX_MODULE_LINES}, no `{REASON}` reason)")
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES and not _says_why(lines, node.lineno + 1, _head_end(node)):
            found.append(
                f"{name}:{node.lineno}: {node.name} is {length} lines "
                f"(over {MAX_FUNCTION_LINES}, no `{REASON}` reason at its head)"
            )
    return found


def test_no_module_or_function_is_too_long_without_a_reason() -> None:
    found = [problem for name, text in _modules() for problem in _oversized(name, text)]
    assert not found, "\n".join(found)


def test_the_checker_finds_what_is_too_long_and_accepts_a_reason() -> None:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(60))
    plain = f"def f():\n{long_body}"
    assert _oversized("m.py", plain) == ["m.py:1: f is 61 lines (over 60, no `# long:` reason at its head)"]
    assert _oversized("m.py", f"def f():\n    # long: a table\n{long_body}") == []
    documented = f'def f():\n    """Doc."""\n    # long: a table\n{long_body}'
    assert _oversized("m.py", documented) == []
    assert _oversized("m.py", f"def f():\n    # long:\n{long_body}") != []  # a reason is required
    module = '"""Doc."""\n' + "x = 1\n" * 450
    assert _oversized("m.py", module) == ["m.py: 451 lines (over 450, no `# long:` reason)"]
    assert _oversized("m.py", '"""Doc."""\n\n# long: one table\n' + "x = 1\n" * 450) == []
