"""The `cairn` commands' side of a store on a NATS JetStream cluster: its options, opening it, export.

`--nats URL` (or `$CAIRN_NATS`) points a read command at a cluster instead
of a local store, `--nats-layout NAME` (or `$CAIRN_NATS_LAYOUT`) at a store
of another layout on it (`Layout.named(NAME)`; tests and benches keep their
stores apart so). Opening probes first (`store.jetstream.probe`): a cluster
that cannot be reached is one line and exit 2 within a few seconds, and a
cluster without a cairn store is not given one. Nothing here imports `nats`
until a cluster is used: cairn without the `cluster` extra still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn._cli_base import EXIT_OK, UsageError, cluster_url, where
from cairn._cli_output import print_json

if TYPE_CHECKING:
    from cairn.store.jetstream.journal import JetStreamJournal
    from cairn.store.jetstream.layout import Layout
    from cairn.store.jetstream.verify import ClusterVerifyReport


def cluster_options() -> argparse.ArgumentParser:
    """The parent parser of the commands that can read a cluster: `--nats` and `--nats-layout`."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--nats",
        default=None,
        metavar="URL",
        help="read the store on this NATS JetStream cluster, not a local one (default: $CAIRN_NATS)",
    )
    options.add_argument(
        "--nats-layout",
        default=os.environ.get("CAIRN_NATS_LAYOUT") or None,
        metavar="NAME",
        help="the cluster store of layout NAME (streams suffixed _NAME; default: $CAIRN_NATS_LAYOUT, "
        "else the standard CAIRN_EVENTS)",
    )
    return options


def layout_of(args: argparse.Namespace) -> Layout:
    from cairn.store.jetstream.layout import Layout

    name = getattr(args, "nats_layout", None)
    return Layout.named(name) if name else Layout()


@contextlib.contextmanager
def open_cluster(args: argparse.Namespace, url: str) -> Iterator[JetStreamJournal]:
    """The cluster store at `url`, open for the body; a connection or request failure in the body is
    `ClusterUnreachable` (exit 2), not a traceback."""
    from nats.errors import Error as NatsError

    from cairn.store.jetstream.probe import ClusterUnreachable, open_existing

    try:
        journal = open_existing(url, layout_of(args))
    except (NatsError, TimeoutError) as exc:
        raise ClusterUnreachable(f"the cluster at {url}: {type(exc).__name__}: {exc}") from None
    try:
        yield journal
    except (NatsError, TimeoutError) as exc:
        raise ClusterUnreachable(f"the cluster at {url} failed: {type(exc).__name__}: {exc}") from None
    finally:
        journal.close()


def verify_on_cluster(args: argparse.Namespace, url: str) -> ClusterVerifyReport:
    """`verify_cluster` of the store at `url`."""
    from cairn.store.jetstream.verify import verify_cluster

    with open_cluster(args, url) as journal:
        return verify_cluster(journal)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the cluster's log as a new local store at `--to` (which must not exist or be empty)."""
    from cairn.store.jetstream.export import export_to_local

    url = cluster_url(args)
    if url is None:
        raise UsageError("export reads a cluster: pass --nats URL (or set $CAIRN_NATS)")
    target = Path(args.to)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory: export into a new one")
    with open_cluster(args, url) as journal:
        report = export_to_local(journal, target)
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        print(
            f"exported {report.sessions} sessions, {report.lines} lines, {report.blobs} blobs "
            f"from {where(args)} to {target}"
        )
    return EXIT_OK
