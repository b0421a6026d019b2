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
    for name in cairn.__all__:
        assert getattr(cairn, name) is not None, name
    tree = ast.parse(Path(cairn.__file__).read_text())
    typed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                typed |= {alias.name for alias in statement.names}
    assert typed == set(cairn.__all__)
