"""What every `cairn` command shares: its exit codes, its usage error, and the store of `--store`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cairn.events.errors import InputError

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(InputError):
    """A command-line or environment problem (bad arguments, no store, no such session): exit 2."""


def store_root(args: argparse.Namespace) -> Path:
    """The store directory of `--store`, or a usage error when there is no store there."""
    root = Path(args.store)
    if not (root / "log").is_dir():
        raise UsageError(f"no cairn store at {root} (set --store or $CAIRN_STORE)")
    return root


def open_store(args: argparse.Namespace) -> Any:
    """The store of `--store`, opened read-only (no lock: other processes may write it)."""
    from cairn.store import Journal

    return Journal.open(store_root(args), readonly=True)
