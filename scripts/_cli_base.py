"""What every `cairn` command shares: its exit codes, its usage error, and the store it reads.

A read command reads either a local store (`--store DIR`, `$CAIRN_STORE`,
default `./cairn-data`) or a store on a NATS JetStream cluster (`--nats URL`
or `$CAIRN_NATS`, the layout of `--nats-layout NAME`); `open_store` gives
either as a `JournalBackend`. A flag beats an environment variable; the two
flags together, or the two variables without a flag, are a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.events.errors import DecodeError, InputError

if TYPE_CHECKING:
    from cairn.store.backend import JournalBackend

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(InputError):
    """A command-line or environment problem (bad arguments, no store, no such session): exit 2."""


class StoreDefault(str):
    """The `--store` value when the flag was not given (from `$CAIRN_STORE` or `./cairn-data`)."""


def default_store() -> StoreDefault:
    return StoreDefault(os.environ.get("CAIRN_STORE", "./cairn-data"))


def cluster_url(args: argparse.Namespace) -> str | None:
    """The cluster URL the command reads, or None for the local store (see the module doc)."""
    flag = getattr(args, "nats", None)
    store_given = not isinstance(args.store, StoreDefault)
    if flag is not None and store_given:
        raise UsageError("--nats and --store are exclusive: read either a cluster or a local store")
    if flag is not None:
        if not flag.strip():
            raise UsageError("--nats needs a URL (nats://host:port, comma-separated for several)")
        return str(flag)
    if store_given or not hasattr(args, "nats"):
        return None
    env = os.environ.get("CAIRN_NATS", "")
    if env and os.environ.get("CAIRN_STORE"):
        raise UsageError("both $CAIRN_NATS and $CAIRN_STORE are set: pass --nats URL or --store DIR")
    return env or None


def where(args: argparse.Namespace) -> str:
    """The store a command reads, for messages: the directory, or the cluster URL (and layout)."""
    url = cluster_url(args)
    if url is None:
        return str(args.store)
    layout = getattr(args, "nats_layout", None)
    return f"the cluster at {url}" + (f" (layout {layout})" if layout else "")


def store_root(args: argparse.Namespace) -> Path:
    """The store directory of `--store`, or a usage error when there is no store there."""
    root = Path(args.store)
    if not (root / "log").is_dir():
        raise UsageError(f"no cairn store at {root} (set --store or $CAIRN_STORE)")
    return root


@contextlib.contextmanager
def open_store(args: argparse.Namespace) -> Iterator[JournalBackend]:
    """The store the command reads, opened read-only: the local one (no lock: other processes may
    write it) or the cluster's (`_cli_cluster.open_cluster`)."""
    url = cluster_url(args)
    if url is None:
        from cairn.store import Journal

        with Journal.open(store_root(args), readonly=True) as journal:
            yield journal
        return
    from cairn._cli_cluster import open_cluster

    with open_cluster(args, url) as cluster:
        yield cluster


def exit_code(error: BaseException) -> int:
    """What an error that ends a command means for its exit status (see `cairn.cli`).

    1 for a problem the store holds (a corrupt line, a bad blob, a line that
    does not decode, acknowledged lines missing, an entry cairn did not make
    in place of its own); 2 for everything that kept the command from running:
    bad arguments, no or another writer's store (`StoreLocked`), a disk that
    failed (`StorageFailed`), an OS error on the path.
    """
    from cairn.store.errors import (
        AcknowledgedDataMissing,
        BlobError,
        CorruptionError,
        IndexUnusable,
        UnexpectedEntry,
    )

    held = (
        CorruptionError | BlobError | DecodeError | AcknowledgedDataMissing | UnexpectedEntry | IndexUnusable
    )
    if isinstance(error, held):
        return EXIT_PROBLEMS
    return EXIT_USAGE
