"""Shared by the JetStream journal tests: a journal on a layout of its own on the shared cluster."""

from __future__ import annotations

import uuid

from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster


def fresh_layout() -> Layout:
    """A stream, blob store and pointer bucket no other test uses."""
    return Layout.named(uuid.uuid4().hex[:10])


def open_journal(cluster: LocalCluster, layout: Layout | None = None) -> JetStreamJournal:
    return JetStreamJournal.open(cluster.url, layout=layout if layout is not None else fresh_layout())
