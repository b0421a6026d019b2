"""Occupancy projection (P1, P3-P6): provider floor, baseline from the log, projection and its source."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.slimming import plan_snip
from cairn.actors.session.tracker import baseline_of, occupancy, project, provider_floor
from cairn.events.kinds import ContextSlimmed, Usage
from cairn.events.model import Message
from cairn.events.state import SessionState, evolve, replay
from tests.session.builders import Session, new_view, summary_message


def _usage(prompt: object, completion: object, total: object) -> Usage:
    return Usage(request_id="r", prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)  # type: ignore[arg-type]


def test_P1_floor_is_max_of_total_and_sum_of_usable_fields() -> None:
    assert provider_floor(_usage(800, 400, 900)) == 1_200
    assert provider_floor(_usage(800, 400, 1_500)) == 1_500
    assert provider_floor(_usage(None, None, 900)) == 900
    assert provider_floor(_usage(800, 400, None)) == 1_200
    assert provider_floor(_usage(800, -1, 900)) == 900  # a negative field is not usable
    assert provider_floor(_usage(True, 400, None)) == 400  # nor is a bool
    assert provider_floor(_usage(0, 0, 0)) == 0
    assert provider_floor(_usage(None, None, None)) is None
    assert provider_floor(_usage(-1, -2, -3)) is None
    assert provider_floor(None) is None


def _answered_session() -> tuple[Session, object]:
    """A session whose last request was answered with usage {800, 400, 900}."""
    session = Session()
    session.user("fix the failing test")
    view = new_view()
    session.request(view, "r1")
    session.assistant("Looking at it.", request_id="r1")
    session.usage("r1", 800, 400, 900)
    return session, view


def test_P3_baseline_comes_from_the_request_and_its_usage() -> None:
    session, _ = _answered_session()
    base = baseline_of(session.state)
    request = session.state.last_request
    assert base is not None and request is not None
    assert base.floor == 1_200
    assert (base.revision, base.history_length, base.model, base.fingerprint, base.fixed_tokens) == (
        request.history_revision,
        request.history_length,
        request.model,
        request.fingerprint,
        request.fixed_tokens,
    )
    assert base.history_length == 1


def test_P3_a_response_without_usable_usage_clears_the_baseline() -> None:
    session, view = _answered_session()
    session.request(view, "r2")
    assert baseline_of(session.state) is None  # a new request has no usage yet
    session.assistant("done", request_id="r2")
    session.usage("r2", None, -3, None)
    assert baseline_of(session.state) is None
    assert occupancy(session.state, view).projection.source == "local_estimate"


def test_P4_without_baseline_the_projection_is_the_local_estimate() -> None:
    session = Session()
    session.user("hello")
    view = new_view()
    occ = occupancy(session.state, view)
    assert occ.projection.source == "local_estimate"
    assert occ.projection.tokens == occ.profile.fixed_tokens + view.total
    assert occ.projection.floor is None


def test_P4_the_provider_counted_its_own_reply() -> None:
    session, view = _answered_session()
    occ = occupancy(session.state, view)
    assert (occ.projection.tokens, occ.projection.source) == (1_200, "provider")
    session.tool_turn(output="tests pass")
    occ = occupancy(session.state, view)
    added = view.tokens(2)  # the tool call and its result, after the reply
    assert (occ.projection.tokens, occ.projection.source) == (1_200 + added, "provider_plus_estimate")


def test_P4_a_new_model_or_profile_is_an_estimate_on_the_floor() -> None:
    session, view = _answered_session()
    other_model = project(session.state, view, occupancy(session.state, view, model="model-b").profile)
    assert (other_model.tokens, other_model.source) == (1_200, "provider_plus_estimate")
    info = session.state.info
    assert info is not None
    longer = msgspec.structs.replace(info, system_prompt=info.system_prompt + " Always run the tests.")
    state = msgspec.structs.replace(session.state, info=longer)
    occ = occupancy(state, view)
    grown = occ.profile.fixed_tokens - occupancy(session.state, view).profile.fixed_tokens
    assert grown > 0
    assert (occ.projection.tokens, occ.projection.source) == (1_200 + grown, "provider_plus_estimate")
    shorter = msgspec.structs.replace(info, system_prompt="")
    occ = occupancy(msgspec.structs.replace(session.state, info=shorter), view)
    assert occ.projection.tokens == 1_200  # a smaller profile never lowers the floor


def test_P4_the_local_estimate_when_the_baseline_does_not_fit() -> None:
    session, view = _answered_session()
    # history shorter than the history sent
    shorter = msgspec.structs.replace(session.state, context=())
    assert occupancy(shorter, view).projection.source == "local_estimate"
    # the revision changed
    slimmed = msgspec.structs.replace(
        session.state, carried=msgspec.structs.replace(session.state.carried, revision=7)
    )
    assert occupancy(slimmed, view).projection.source == "local_estimate"
    # the first message appended after the request is not the reply
    steered = Session()
    steered.user("fix it")
    steered_view = new_view()
    steered.request(steered_view, "r1")
    steered.user("and also update the docs")
    steered.assistant("On it.", request_id="r1")
    steered.usage("r1", 800, 400, 900)
    occ = occupancy(steered.state, steered_view)
    assert occ.projection.source == "local_estimate"
    assert occ.projection.tokens == occ.projection.local_tokens


def test_P4_history_as_long_as_the_baseline_sent_is_a_local_estimate() -> None:
    # usage arrived for r1 but no reply was recorded: the history is exactly as long as the
    # history sent (P4's "shorter than the baseline's" boundary, the equal case)
    session = Session()
    session.user("fix the failing test")
    view = new_view()
    session.request(view, "r1")
    session.usage("r1", 800, 400, 900)
    base = baseline_of(session.state)
    assert base is not None and base.history_length == len(session.state.context) == 1
    occ = occupancy(session.state, view)
    assert occ.projection.source == "local_estimate"
    assert occ.projection.tokens == occ.projection.local_tokens
    assert occ.projection.floor is None


@given(
    prompt=st.none() | st.integers(-5, 10**7),
    completion=st.none() | st.integers(-5, 10**6),
    total=st.none() | st.integers(-5, 10**7),
    appended=st.integers(0, 4),
    steer=st.booleans(),
)
def test_P4_projection_never_drops_below_the_floor_while_the_baseline_is_valid(
    prompt: int | None, completion: int | None, total: int | None, appended: int, steer: bool
) -> None:
    session = Session()
    session.user("start")
    view = new_view()
    session.request(view, "r1")
    if steer:
        session.user("steering")
    session.assistant("reply", request_id="r1")
    session.usage("r1", prompt, completion, total)
    for _ in range(appended):
        session.tool_turn(output="output")
    projection = occupancy(session.state, view).projection
    floor = provider_floor(session.state.last_usage)
    if floor is not None and not steer:
        assert projection.source != "local_estimate"
        assert projection.tokens >= floor
    else:
        assert projection.source == "local_estimate"


def test_P5_revision_rises_on_rewrites_and_never_on_appends() -> None:
    session = Session()
    for _ in range(3):
        session.tool_turn()
    session.user("more")
    session.assistant()
    assert session.state.revision == 0
    first_call = session.state.context[0].tool_calls[0].id
    slim = ContextSlimmed(mode="snip", removed_call_ids=(first_call,), tokens_saved=1, marker_text="[x]")
    session.add(slim)
    assert session.state.revision == 1
    session.checkpoint((summary_message(),))
    assert session.state.revision == 2
    session.user("after")
    assert session.state.revision == 2


def _long_session() -> tuple[Session, list[SessionState]]:
    """A session with requests, usage, tool turns, a slimming and a checkpoint; the live states."""
    session = Session(window=30_000, cap=4_000)
    live = [session.state]
    view = new_view()
    session.user("refactor the parser")
    for n in range(40):
        session.request(view, f"r{n}")
        session.tool_turn(output=f"result {n} " * 40, name="read" if n % 2 else "edit")
        session.usage(f"r{n}", 400 + 800 * n, 30, None)
        live.append(session.state)
        if n == 25:
            occ = occupancy(session.state, view)
            plan = plan_snip(session.state, view, occ)
            assert plan is not None
            session.add(plan.event)
            live.append(session.state)
        if n == 32:
            session.checkpoint((summary_message(), Message(role="user", content="continue")))
            live.append(session.state)
    return session, live


def test_P6_replay_gives_the_baseline_and_projection_the_live_session_had() -> None:
    session, live = _long_session()
    for state in live[1:]:
        replayed = replay(session.records[: state.last_seq])
        assert replayed == state
        assert baseline_of(replayed) == baseline_of(state)
        assert occupancy(replayed, new_view()) == occupancy(state, new_view())
    final = replay(session.records)
    assert baseline_of(final) is not None
    # the floor survives a restart: the first projection after recovery starts from it
    assert occupancy(final, new_view()).projection.source == "provider_plus_estimate"


def test_P6_folding_live_with_evolve_equals_replay() -> None:
    session, _ = _long_session()
    state = SessionState()
    view_live = new_view()
    for record in session.records:
        state = evolve(state, record)
        occupancy(state, view_live)  # the live view follows every event incrementally
    replayed = replay(session.records)
    assert state == replayed
    assert occupancy(state, view_live) == occupancy(replayed, new_view())


def _cached(prompt: object, reads: object, writes: object, completion: object, total: object) -> Usage:
    return Usage(
        request_id="r",
        prompt_tokens=prompt,  # type: ignore[arg-type]
        completion_tokens=completion,  # type: ignore[arg-type]
        total_tokens=total,  # type: ignore[arg-type]
        cached_prompt_tokens=reads,  # type: ignore[arg-type]
        cache_write_tokens=writes,  # type: ignore[arg-type]
    )


def test_P1_cache_reads_and_writes_in_the_whole_prompt_count_once() -> None:
    # input 100, cache read 5,000, cache write 2,000, output 50, as the convention reports it:
    # prompt_tokens is the whole prompt (7,100), reads and writes are parts of it
    assert _cached(7_100, 5_000, 2_000, 50, None).whole_prompt() == 7_100
    assert provider_floor(_cached(7_100, 5_000, 2_000, 50, None)) == 7_150
    assert provider_floor(_cached(7_100, 5_000, 2_000, 50, 7_150)) == 7_150
    assert provider_floor(_cached(7_100, 5_000, None, 50, None)) == 7_150  # OpenAI: reads only
    assert provider_floor(_cached(7_100, 0, 0, 50, None)) == 7_150


def test_P1_a_report_that_left_the_cache_out_of_prompt_tokens_never_undercounts() -> None:
    # the same request as Anthropic reports it raw: input_tokens 100 beside the cache figures
    assert _cached(100, 5_000, 2_000, 50, None).whole_prompt() == 7_100
    assert provider_floor(_cached(100, 5_000, 2_000, 50, None)) == 7_150
    assert provider_floor(_cached(100, 5_000, 2_000, 50, 150)) == 7_150  # a total of input + output
    assert provider_floor(_cached(None, 5_000, 2_000, 50, None)) == 7_050  # only the cache figures
    assert provider_floor(_cached(None, 5_000, 2_000, None, None)) == 7_000


def test_P1_unusable_cache_figures_are_left_out() -> None:
    assert provider_floor(_cached(7_100, -5, 2_000, 50, None)) == 7_150
    assert provider_floor(_cached(100, -5, -2, 50, None)) == 150
    assert provider_floor(_cached(100, True, None, 50, None)) == 150
    assert _cached(None, None, None, 50, 60).whole_prompt() is None
    assert provider_floor(_cached(None, None, None, None, None)) is None


def test_P3_P4_the_baseline_floor_holds_the_cached_tokens() -> None:
    session = Session()
    session.user("fix the failing test")
    view = new_view()
    session.request(view, "r1")
    session.assistant("Looking at it.", request_id="r1")
    session.add(
        Usage(
            request_id="r1",
            prompt_tokens=100,
            completion_tokens=50,
            cached_prompt_tokens=5_000,
            cache_write_tokens=2_000,
        )
    )
    base = baseline_of(session.state)
    assert base is not None and base.floor == 7_150
    occ = occupancy(session.state, view)
    assert occ.projection.source == "provider" and occ.projection.tokens == 7_150
