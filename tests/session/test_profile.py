"""The request profile (P2): fingerprint and fixed tokens."""

from __future__ import annotations

import msgspec

from cairn.actors.session.profile import fingerprint, profile_of, system_messages, tools_json
from cairn.events.state import SessionInfo
from tests.session.builders import counter

TOOLS = ('{"name":"read","parameters":{"type":"object"}}', '{"name":"edit","parameters":{}}')


def _info(**changes: object) -> SessionInfo:
    info = SessionInfo(workspace="/w", model="m1", system_prompt="Be careful.", tool_schemas=TOOLS)
    return msgspec.structs.replace(info, **changes)


def test_P2_fixed_tokens_are_system_plus_tool_json_plus_eight_per_tool() -> None:
    c = counter()
    profile = profile_of(_info(), c)
    assert profile.system == system_messages("Be careful.")
    assert profile.system_tokens == c.messages(profile.system)
    assert profile.tools_tokens == c.text(tools_json(TOOLS)) + 8 * 2  # P2: 8 per tool, stated literally
    one = profile_of(_info(tool_schemas=TOOLS[:1]), c)
    assert one.tools_tokens == c.text(tools_json(TOOLS[:1])) + 8
    assert profile.fixed_tokens == profile.system_tokens + profile.tools_tokens
    bare = profile_of(_info(system_prompt="", tool_schemas=()), c)
    assert (bare.system, bare.system_tokens, bare.tools_tokens) == ((), 0, 0)


def test_P2_fingerprint_covers_model_system_and_tools_canonically() -> None:
    c = counter()
    base = profile_of(_info(), c).fingerprint
    assert len(base) == 64
    assert profile_of(_info(), c).fingerprint == base
    assert profile_of(_info(), c, model="m2").fingerprint != base
    assert profile_of(_info(system_prompt="Be bold."), c).fingerprint != base
    assert profile_of(_info(tool_schemas=TOOLS[:1]), c).fingerprint != base
    assert profile_of(_info(tool_schemas=TOOLS[::-1]), c).fingerprint != base
    # canonical JSON: key order and spacing of a schema do not matter
    reordered = ('{"parameters": {"type": "object"}, "name": "read"}', TOOLS[1])
    assert profile_of(_info(tool_schemas=reordered), c).fingerprint == base
    # the parts are separated: moving text from the model into the prompt changes the digest
    system = system_messages("x")
    assert fingerprint("ab", system, ()) != fingerprint("a", system_messages("bx"), ())
