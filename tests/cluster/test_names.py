"""Session ids as NATS subject tokens and KV keys: reversible, never a wildcard, bad ids refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.events.errors import InvalidSessionId
from cairn.store.jetstream.names import events_subject, session_of_token, session_token

#: what NATS accepts as a KV key (nats-server's key pattern)
KV_KEY = re.compile(r"[-/_=.a-zA-Z0-9]+")

session_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}", fullmatch=True).filter(
    lambda s: ".." not in s
)


@given(session_ids)
def test_every_session_id_is_one_token_a_kv_key_and_comes_back(sid: str) -> None:
    token = session_token(sid)
    assert "." not in token and "*" not in token and ">" not in token and " " not in token
    assert KV_KEY.fullmatch(token)
    assert session_of_token(token) == sid


def test_readable_ids_stay_readable_and_nats_characters_are_escaped() -> None:
    assert session_token("demo-1") == "demo-1"
    assert session_token("a.b") == "a=2Eb"
    assert session_token("u@x:1+2=3") == "u=40x=3A1=2B2=3D3"
    assert events_subject("a.b") == "cairn.events.a=2Eb"


@pytest.mark.parametrize("bad", ["*", ">", "a b", "a.*", "cairn.>", "", "..", "a..b", "x\n", "é", "a" * 129])
def test_ids_nats_would_misread_are_refused_before_any_subject_is_made(bad: str) -> None:
    with pytest.raises(InvalidSessionId):
        events_subject(bad)


@pytest.mark.parametrize("token", ["a=2eb", "=61", "a.b", "*", "=4", "=C3=A9"])
def test_only_canonical_tokens_decode(token: str) -> None:
    with pytest.raises(InvalidSessionId):
        session_of_token(token)
