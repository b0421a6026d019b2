"""The scratch workspace of a demo session: a small Python shop of eight modules, tests and a README."""

from __future__ import annotations

from pathlib import Path

MODULES = ("billing", "inventory", "shipping", "users", "reports", "search", "auth", "orders")


def _module_source(name: str, index: int) -> str:
    lines = [f'"""The {name} module of the demo shop."""', "", "import math", ""]
    for n in range(6):
        fn = f"{name}_{['load', 'check', 'total', 'apply', 'format', 'sync'][n]}"
        lines.append(f"def {fn}(items, limit={10 * (n + index + 1)}):")
        if (n + index) % 3:
            lines.append(f'    """{fn.replace("_", " ").capitalize()} for at most `limit` items."""')
        else:
            lines.append(f"    # TODO({name}): document {fn} and cap the retries at {3 + n}")
        lines.append("    total = 0")
        lines.append("    for item in items[:limit]:")
        lines.append(f"        total += math.ceil(item * {n + 2} / {index + 3})")
        lines.append("    return total")
        lines.append("")
    return "\n".join(lines) + "\n"


def make_workspace(path: Path, index: int) -> None:
    """A small repository to work on; left as it is when it exists (the demo continues)."""
    if path.exists():
        return
    (path / "src").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "notes").mkdir()  # where the agent writes its notes (the MCP filesystem server makes no folders)
    (path / "README.md").write_text(
        f"# demo shop {index}\n\nModules: {', '.join(MODULES)}.\nRun the tests with pytest.\n"
    )
    for n, name in enumerate(MODULES):
        (path / "src" / f"{name}.py").write_text(_module_source(name, index + n))
        (path / "tests" / f"test_{name}.py").write_text(
            f"from src.{name} import {name}_total\n\n\ndef test_{name}_total():\n"
            f"    assert {name}_total([1, 2, 3]) >= 0\n"
        )
