"""The audit export's usage table carries the cache writes beside the cache reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from cairn import cli
from cairn.events.kinds import SessionStarted, Usage
from cairn.store import Journal


def test_the_usage_table_has_cache_writes_null_where_the_provider_gave_none(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Journal.open(store) as journal:
        journal.append(
            "s",
            [
                SessionStarted(workspace="/w", model="m"),
                Usage(
                    request_id="r1", prompt_tokens=7_100, cached_prompt_tokens=5_000, cache_write_tokens=2_000
                ),
                Usage(request_id="r2", prompt_tokens=7_300, cached_prompt_tokens=7_100),
            ],
            expected_seq=0,
        )
    to = tmp_path / "tables"
    assert cli.main(["export", "--store", str(store), "--format", "parquet", "--to", str(to)]) == 0
    table = pq.read_table(to / "usage")
    assert table.column("cached_prompt_tokens").to_pylist() == [5_000, 7_100]
    assert table.column("cache_write_tokens").to_pylist() == [2_000, None]
    assert str(table.schema.field("cache_write_tokens").type) == "int64"
