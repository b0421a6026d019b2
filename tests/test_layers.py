"""The import graph is one-way (DESIGN §1): a contract, checked on every run of the suite.

Layers, highest first: `cairn` itself (scripts/: the CLI, the demo, the
benches) -> `cairn.actors` -> `cairn.store` -> `cairn.events`. Inside actors:
http -> cluster -> host -> session -> compactor -> provider, beside shared leaves that import
none of those four. A module may import its own layer and any layer below
it, never one above; imports inside functions and under TYPE_CHECKING count.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: repository folder -> package name (pyproject.toml's package-dir)
FOLDERS = {"scripts": "cairn", "actors": "cairn.actors", "store": "cairn.store", "events": "cairn.events"}
LAYERS = ("cairn.events", "cairn.store", "cairn.actors", "cairn")  # lowest first
ACTOR_RANKS = {
    "provider": 0,
    "compactor": 1,
    "session": 2,
    "host": 3,
    "cluster": 4,
    "http": 5,
}  # lowest first
ACTOR_LEAVES = {"budget_rule", "errors", "tokens", "tools", "workspace_fs", "placement", "mcp_tools"}


def module_name(path: Path) -> str:
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    parts = [FOLDERS[folder], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    """The index in LAYERS of the most specific layer holding `module`."""
    holding = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return LAYERS.index(max(holding, key=len))


def actor_part(module: str) -> str:
    """`host`, `session`, `compactor`, `provider`, `leaf`, or `package` (cairn.actors itself)."""
    parts = module.split(".")
    if len(parts) == 2:
        return "package"
    return parts[2] if parts[2] in ACTOR_RANKS else "leaf"


def upward(importer: str, imported: str) -> bool:
    """Whether `importer` importing `imported` goes against the graph."""
    if not imported.startswith("cairn"):
        return False
    if imported == "cairn" and layer(importer) != LAYERS.index("cairn"):
        return True  # the public surface re-exports everything: no lower layer may lean on it
    if layer(imported) > layer(importer):
        return True
    if layer(importer) != LAYERS.index("cairn.actors") or layer(imported) != layer(importer):
        return False
    mine, theirs = actor_part(importer), actor_part(imported)
    if theirs == "package":
        return True
    if mine == "leaf":
        return theirs != "leaf"
    if mine == "package" or theirs == "leaf":
        return False
    return ACTOR_RANKS[theirs] > ACTOR_RANKS[mine]


def imports_of(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def violations() -> list[str]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            importer = module_name(path)
            for line, imported in imports_of(path):
                if upward(importer, imported):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {importer} imports {imported}")
    return found


def test_every_import_goes_down_the_layers() -> None:
    assert violations() == []


def test_the_contract_catches_an_upward_import() -> None:
    assert upward("cairn.events.codec", "cairn.store.journal")
    assert upward("cairn.store.journal", "cairn.actors.host")
    assert upward("cairn.actors.host", "cairn.cli")
    assert upward("cairn.actors.compactor.service", "cairn.actors.session.tokens")
    assert upward("cairn.actors.provider.scripted", "cairn.actors.compactor.ledger")
    assert upward("cairn.actors.tokens", "cairn.actors.session.view")  # a leaf imports no layer
    assert upward("cairn.actors.session.actor", "cairn")
    assert not upward("cairn.actors.host", "cairn.actors.session.actor")
    assert not upward("cairn.actors.session.actor", "cairn.actors.provider.base")
    assert not upward("cairn.actors.compactor.service", "cairn.actors.tokens")
    assert not upward("cairn.cli", "cairn.store")
    assert not upward("cairn.demo", "cairn")
    assert not upward("cairn.store.journal", "cairn.events.codec")
