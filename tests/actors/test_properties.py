"""Property: whatever the model and the disk-free failures do, a session replays to what it was live.

Hypothesis draws a conversation (messages that make the scripted agent call
tools and grow the context past the hand-off band and the compaction
threshold) and a plan of provider misbehaviour for turns and for summary
calls (rate limits, 5xx, bad requests, context-limit errors before and
after output, empty replies). Every turn must end, every session must
replay to the same state and next request, and the store must verify.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cairn.actors.provider.scripted import Fail, FailAfter, context_limit, empty_reply, http_error
from cairn.store import verify_store
from tests.actors.helpers import WAIT, open_host, reopen_and_compare, scripted

TURN_TROUBLE = st.sampled_from(
    [
        http_error(429),
        http_error(503),
        http_error(400),
        context_limit(),
        FailAfter(failure=Fail(error_class="server", message="reset", status_code=502, retryable=True)),
        empty_reply(),
    ]
)
SUMMARY_TROUBLE = st.sampled_from([http_error(503), empty_reply(), http_error(400), context_limit()])
MESSAGE = st.tuples(st.integers(0, 5), st.one_of(st.integers(40, 300), st.integers(300, 1_200)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(MESSAGE, min_size=1, max_size=10),
    turn_trouble=st.lists(TURN_TROUBLE, max_size=6),
    summary_trouble=st.lists(SUMMARY_TROUBLE, max_size=4),
    sessions=st.integers(1, 2),
)
def test_every_conversation_ends_and_replays_to_its_live_state(
    messages: list[tuple[int, int]],
    turn_trouble: list[object],
    summary_trouble: list[object],
    sessions: int,
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "store"
        provider = scripted(*turn_trouble, summaries=tuple(summary_trouble))  # type: ignore[arg-type]
        host = open_host(root, provider)
        sids = [f"s{n}" for n in range(sessions)]
        for index, (calls, tokens) in enumerate(messages):
            for sid in sids:
                text = f"Work on it: tools {calls} x {tokens} #{sid}-{index}"
                result = host.send(sid, text, workspace=scratch).result(WAIT)
                assert result.status in ("completed", "failed"), result
        for sid in sids:  # what the example exercised, for --hypothesis-show-statistics
            seen = {record.line_kind for record in host.journal.read(sid)}
            for kind in (
                "handoff",
                "context-slimmed",
                "checkpoint-committed",
                "compaction-failed",
                "provider-error",
                "turn-failed",
            ):
                if kind in seen:
                    event(f"saw {kind}")
        reopen_and_compare(host, root, sids).close()
        report = verify_store(root)
        assert not report.problems, report.problems
