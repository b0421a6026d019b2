"""client_view: every kind, hostile text in every field, never a hidden event, never the host's setup.

Each kind's hypothesis strategy (`tests.strategies`) draws events; each is
put in a record and viewed. The view must be JSON-ready, name its kind,
leave out the private fields (the workspace above all) unless asked, and
show nothing of a hidden event even then. What the user wrote, a path in
it too, stays as written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn import (
    Host,
    HostConfig,
    InputError,
    ReasoningDelta,
    TextDelta,
    TextPart,
    TranscriptEntry,
    client_view,
    demo,
)
from cairn.actors.host.client_view import PRIVATE_FIELDS, ShownEvent, shown_event
from cairn.actors.session.handoff import is_hidden_event
from cairn.events.codec import Record
from cairn.events.errors import InvalidEvent
from cairn.events.kinds import EVENT_TYPES, KINDS, CompactionFailed, EventBase, SessionStarted, UserMessage
from tests.every_kind import EVERY_KIND, add_the_rest
from tests.strategies import HOSTILE_KIND_STRATEGIES, KIND_STRATEGIES

#: a path no strategy draws: where a view shows it, it came from the field it was put in
WORKSPACE = "/home/secret-user/very-private-workspace"
#: the fields any kind may hold that a client never sees by default
PRIVATE = {"system_prompt", "tool_schemas", "read_only_tools", "workspace", "files", "reasoning_blocks"}


def _record(event: EventBase, seq: int = 3) -> Record:
    return Record(pos=10, sid="s-1", seq=seq, ts=1_767_225_600_000, prev="", event=event)


def _marked(event: EventBase) -> EventBase:
    """`event` with the workspace in the fields that hold one (session-started, compaction-failed)."""
    if isinstance(event, SessionStarted | CompactionFailed):
        return msgspec.structs.replace(event, workspace=WORKSPACE)
    return event


def test_every_kind_has_a_strategy() -> None:
    assert set(KIND_STRATEGIES) == set(KINDS) == {str(c.__struct_config__.tag) for c in EVENT_TYPES}


def _check_view(event: EventBase) -> None:
    record = _record(_marked(event))
    view = client_view(record)
    private = client_view(record, include_private=True)
    if is_hidden_event(event):
        assert view is None and private is None
        return
    assert view is not None and private is not None
    assert view["kind"] == record.kind == private["kind"]
    assert (view["session"], view["seq"], view["ts"]) == ("s-1", 3, record.ts)
    assert not PRIVATE & set(view), f"{record.kind}: {PRIVATE & set(view)}"
    for name in PRIVATE_FIELDS.get(type(event), ()):
        assert name not in view
    assert set(view) <= set(private) and all(private[k] == v for k, v in view.items())
    assert "prev" not in view and "pos" not in view  # the log's own bookkeeping
    if isinstance(event, SessionStarted | CompactionFailed):
        assert WORKSPACE not in repr(view) and private["workspace"] == WORKSPACE
    shown: ShownEvent | None = shown_event(event)
    if shown is not None:  # the transcript's view is the client's
        assert {**msgspec.to_builtins(shown), "kind": record.kind}.items() <= view.items()


@pytest.mark.parametrize("kind", sorted(KIND_STRATEGIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_kind_is_viewed_without_private_fields(kind: str, data: st.DataObject) -> None:
    event = data.draw(KIND_STRATEGIES[kind])
    _check_view(event)
    view = client_view(_record(_marked(event)))
    if view is not None:
        json.loads(json.dumps(view))  # JSON-ready


@pytest.mark.parametrize("kind", sorted(HOSTILE_KIND_STRATEGIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_kind_with_hostile_text_is_viewed_privately(kind: str, data: st.DataObject) -> None:
    drawn: Any = data.draw(HOSTILE_KIND_STRATEGIES[kind])
    if isinstance(drawn, InvalidEvent):
        return  # refused when built: it never reaches a log, nor a client
    _check_view(drawn)


def test_a_path_the_user_wrote_stays_but_the_workspace_field_does_not_appear() -> None:
    started = client_view(_record(SessionStarted(workspace=WORKSPACE, model="m", system_prompt="secret"), 1))
    said = client_view(_record(UserMessage(message_id="u2", content=(TextPart(f"see {WORKSPACE}/a.py"),)), 2))
    assert started is not None and said is not None
    assert WORKSPACE not in json.dumps(started) and "secret" not in json.dumps(started)
    assert list(said["parts"]) == [{"type": "text", "text": f"see {WORKSPACE}/a.py"}]


def test_deltas_are_their_text_and_anything_else_is_refused() -> None:
    assert client_view(TextDelta("hel")) == {"kind": "text-delta", "text": "hel"}
    assert client_view(ReasoningDelta("hmm")) == {"kind": "reasoning-delta", "text": "hmm"}
    for bad in ({"kind": "user-message"}, "text", None, UserMessage(message_id="u", content=())):
        with pytest.raises(InputError, match="client_view"):
            client_view(bad)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("every-kind") / "store"
    report = demo.run(root, 5, 12, show=False, plain=False)
    assert report["ok"], report
    add_the_rest(root)
    return root


def test_a_store_of_every_kind_is_viewed_and_paged_safely(every_kind: Path) -> None:
    """The demo's store plus `tests.every_kind`: every record viewed, every session paged."""
    seen: set[str] = set()
    with Host.open(every_kind, config=HostConfig(sweep=False)) as host:
        for sid in host.sessions():
            workspaces: set[str] = set()
            for record in host.journal.read(sid):
                seen.add(record.kind)
                if isinstance(record.event, SessionStarted | CompactionFailed) and record.event.workspace:
                    workspaces.add(record.event.workspace)
                _check_view(record.event)
                view = client_view(record)
                if view is not None:
                    json.dumps(view)
                    assert record.kind not in {"session-started", "compaction-failed"} or not any(
                        w in json.dumps(view) for w in workspaces
                    )
            shown = _pages(host, sid)
            views = [client_view(r) for r in host.journal.read(sid)]
            by_seq = {v["seq"]: v for v in views if v is not None}
            for entry in shown:  # the transcript's items are the client's views
                view = by_seq[entry.seq]
                assert {**msgspec.to_builtins(entry.item), "kind": view["kind"]}.items() <= view.items()
            kinds_shown = {by_seq[e.seq]["kind"] for e in shown}
            assert kinds_shown == {v["kind"] for v in views if v is not None} & TRANSCRIPT_KINDS
    assert seen >= EVERY_KIND, EVERY_KIND - seen


TRANSCRIPT_KINDS = {
    "user-message",
    "assistant-message",
    "tool-result",
    "turn-started",
    "turn-completed",
    "turn-failed",
    "turn-cancelled",
}


def _pages(host: Host, sid: str) -> list[TranscriptEntry]:
    found: list[TranscriptEntry] = []
    after = 0
    while True:
        page = host.transcript(sid, after=after, limit=7)
        found.extend(page.entries)
        if not page.more:
            return found
        after = page.next_after
