"""The shared atomic batch of many sessions' calls (`store.jetstream.group`): pure framing rules."""

from __future__ import annotations

from cairn.store.jetstream.group import GROUP_MAX_MSGS, Part, chunks, group_headers, last_stream_seqs


def test_each_call_in_a_shared_batch_is_guarded_on_its_first_message_and_the_last_commits() -> None:
    parts = [
        Part([b"a1"], ["a.1.x"], 10),
        Part([b"b1", b"b2"], ["b.1.y", "b.2.z"], 0),
        Part([b"c"], ["c.5.w"], 7),
    ]
    headers = group_headers("B", parts)
    assert [h["Nats-Batch-Sequence"] for h in headers] == ["1", "2", "3", "4"]
    assert all(h["Nats-Batch-Id"] == "B" for h in headers)
    assert [h["Nats-Msg-Id"] for h in headers] == ["a.1.x", "b.1.y", "b.2.z", "c.5.w"]
    assert [h.get("Nats-Expected-Last-Subject-Sequence") for h in headers] == ["10", "0", None, "7"]
    assert [h.get("Nats-Batch-Commit") for h in headers] == [None, None, None, "1"]


def test_the_stream_seq_of_each_calls_last_line_follows_from_the_batchs_last() -> None:
    assert last_stream_seqs(109, [1, 2, 1]) == [106, 108, 109]  # a batch is stored contiguously
    assert last_stream_seqs(5, [5]) == [5]


def test_calls_are_split_into_batches_of_at_most_256_messages_never_inside_a_call() -> None:
    assert GROUP_MAX_MSGS == 256
    assert chunks([1] * 600) == [range(0, 256), range(256, 512), range(512, 600)]
    assert chunks([200, 100, 56, 1]) == [range(0, 1), range(1, 4)]
    assert chunks([300, 1]) == [range(0, 1), range(1, 2)]  # a call over the limit goes alone
    assert chunks([]) == []
