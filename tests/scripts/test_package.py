"""Installed, cairn is one package: `cairn`, its public surface in `__all__`, nothing at the top level."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import cairn

ROOT = Path(__file__).resolve().parents[2]


def test_every_installed_package_lives_under_cairn() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(name == "cairn" or name.startswith("cairn.") for name in config["packages"])
    assert config["package-dir"] == {
        "cairn": "scripts",
        "cairn.events": "events",
        "cairn.store": "store",
        "cairn.actors": "actors",
    }
    for folder in ("events", "store", "actors", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            assert "sys.path.insert" not in path.read_text(), path


def test_a_hosts_own_store_folder_does_not_shadow_cairn(tmp_path: Path) -> None:
    for name in ("store", "events", "actors", "scripts"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the host project, not cairn')\n")
    done = subprocess.run(
        [sys.executable, "-c", "import cairn.store, cairn.events; from cairn import Host; print('ok')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_every_public_name_resolves_and_is_declared_for_type_checkers() -> None:
    """`_WHERE` is the one list; the `TYPE_CHECKING` imports must name the same modules and names."""
    assert cairn.__all__ == sorted(cairn._WHERE)
    for name in cairn.__all__:
        assert getattr(cairn, name) is not None, name
    tree = ast.parse(Path(cairn.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it `as` itself (a re-export)"
                    typed[alias.name] = statement.module
    missing = sorted(set(cairn._WHERE) - set(typed))
    extra = sorted(set(typed) - set(cairn._WHERE))
    moved = sorted(name for name in set(typed) & set(cairn._WHERE) if typed[name] != cairn._WHERE[name])
    assert not (missing or extra or moved), (
        f"TYPE_CHECKING imports and _WHERE differ: missing {missing}, not public {extra}, "
        f"another module {moved}"
    )
