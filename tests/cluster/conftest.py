"""One real 3-node JetStream cluster on 127.0.0.1 shared by the cluster tests of a run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.store.jetstream.local_cluster import LocalCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running cluster; tests that stop or kill a node start their own instead."""
    with LocalCluster(Path(tmp_path_factory.mktemp("nats"))) as running:
        yield running
