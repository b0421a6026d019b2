"""Audit tooling over a cairn store: typed tables for analysts (`cairn export --format`).

Heavy dependencies (pyarrow) come from the optional extra `audit`
(`pip install 'cairn[audit]'`); `require` turns their absence into one line.
"""

from __future__ import annotations

from types import ModuleType

from cairn.events.errors import InputError

EXTRA_HINT = "pip install 'cairn[audit]'"


class ExtraMissing(InputError):
    """A command needs a package of the `audit` extra that is not installed (exit 2)."""


def require(module: str) -> ModuleType:
    """Import `module`, or raise `ExtraMissing` naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise ExtraMissing(f"this command needs {top}, from the audit extra: {EXTRA_HINT}") from None
