"""verify's index comparison walks two indexes once, in order, and holds only the entries that differ."""

from __future__ import annotations

from cairn.store.verify_index import _differences


def test_only_the_differing_entries_are_kept_and_the_recovery_point_is_left_out() -> None:
    ours = [
        ("events", b"a\x00\x01", b"1"),
        ("events", b"a\x00\x02", b"2"),
        ("events", b"b\x00\x01", b"x"),  # another value in the rebuild
        ("sessions", b"a", b"s"),
        ("meta", b"format", b"f"),
        ("meta", b"through", b"here"),  # differs, but the point is compared elsewhere
    ]
    theirs = [
        ("events", b"a\x00\x01", b"1"),
        ("events", b"b\x00\x01", b"y"),
        ("events", b"c\x00\x01", b"3"),  # only in the rebuild
        ("sessions", b"a", b"s"),
        ("corrupt", b"k", b"c"),  # only in the rebuild, in a later db
        ("meta", b"format", b"f"),
        ("meta", b"through", b"there"),
    ]
    have, want = _differences(iter(ours), iter(theirs))
    assert have == {("events", b"a\x00\x02"): b"2", ("events", b"b\x00\x01"): b"x"}
    assert want == {("events", b"b\x00\x01"): b"y", ("events", b"c\x00\x01"): b"3", ("corrupt", b"k"): b"c"}
    assert _differences(iter(ours), iter(ours)) == ({}, {})
    assert _differences(iter([]), iter(theirs[:1])) == ({}, {("events", b"a\x00\x01"): b"1"})
