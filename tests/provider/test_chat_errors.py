"""Error classes (R1, C5) and the key scrubber, on the pure parts of `chat_errors`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.provider.chat_errors import REDACTED, scrubber, status_class, to_failure
from cairn.actors.provider.chat_stream import MalformedChunk, TruncatedStream

#: R1's phrase list, stated literally (not the module's tuple, so a dropped phrase fails)
R1_PHRASES = (
    "prompt_too_long",
    "prompt is too long",
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "request too large",
)


@pytest.mark.parametrize("phrase", R1_PHRASES)
@pytest.mark.parametrize("status", [400, 429, 500, None])
def test_R1_any_phrase_in_any_case_is_a_context_limit(phrase: str, status: int | None) -> None:
    assert status_class(status, f"Error: {phrase.upper()} (details)") == "context-limit"


def test_R1_llama_cpps_context_size_error_is_a_context_limit() -> None:
    """Beyond R1: llama.cpp's server's own words (HTTP 400, `exceed_context_size_error`), as it sent
    them to a 2,031-token request on a 512-token slot."""
    said = "request (2031 tokens) exceeds the available context size (512 tokens), try increasing it"
    assert status_class(400, said) == "context-limit"


def test_R1_413_is_a_context_limit_whatever_it_says() -> None:
    assert status_class(413, "Payload Too Large") == "context-limit"


@given(
    st.text(min_size=4, max_size=40).filter(lambda s: s.strip() == s and " " not in s), st.text(max_size=30)
)
def test_the_scrubber_removes_every_copy_of_the_key(key: str, around: str) -> None:
    scrub = scrubber(key)
    assert key not in scrub(f"{around}{key}{around}{key}")


def test_the_scrubber_removes_bearer_tokens_it_was_not_told_about() -> None:
    scrub = scrubber(None)
    assert (
        scrub('header "Authorization: Bearer abc.def-123" sent')
        == f'header "Authorization: Bearer {REDACTED}" sent'
    )


def test_our_own_stream_errors_have_classes_and_unknown_errors_are_not_ours() -> None:
    def convert(error: BaseException):  # type: ignore[no-untyped-def]
        return to_failure(error, scrub=str, endpoint="http://x/v1", timeout_s=1.0, output_delivered=True)

    cut = convert(TruncatedStream("no finish"))
    bad = convert(MalformedChunk("odd"))
    assert cut is not None and (cut.error_class, cut.retryable, cut.output_delivered) == (
        "network",
        True,
        True,
    )
    assert bad is not None and (bad.error_class, bad.retryable) == ("server", False)
    reset = convert(ConnectionResetError("reset by peer"))
    assert reset is not None and (reset.error_class, reset.retryable) == ("network", True)
    assert convert(KeyError("our bug")) is None
