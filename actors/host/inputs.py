"""What `Host.send` is given, checked at the edge: a user message, a workspace path, settings.

Each raises `InputError` saying what was expected, before anything is
written, so a malformed argument never becomes an unreadable log line.
"""

from __future__ import annotations

import base64
import binascii
import os
import unicodedata
from collections.abc import Mapping

import msgspec

from cairn.actors.errors import MessageTooLarge, NoInputBudget
from cairn.actors.session.budget import output_reserve
from cairn.actors.session.idempotency import MAX_KEY_CHARS
from cairn.actors.session.settings import SessionSettings
from cairn.events.errors import InputError
from cairn.events.model import ImagePart, Part, TextPart
from cairn.store.blobs import BLOB_THRESHOLD, oversized


def absolute_workspace(workspace: str | os.PathLike[str]) -> str:
    """A workspace as sessions record it: absolute (against the current directory) and normalized.

    Not the compactor's `breaker.normalize_workspace`, a lexical key that never reads the cwd.
    """
    return os.path.normpath(os.path.abspath(os.fspath(workspace)))


_parts_decoder = msgspec.json.Decoder(tuple[TextPart | ImagePart, ...])
_settings_decoder = msgspec.json.Decoder(SessionSettings)


def user_content(message: object) -> str | tuple[Part, ...]:
    """A host's user message, checked: non-empty text, or text and image parts.

    Parts go through a JSON round trip (msgspec does not check field types
    when a Struct is built), so a `TextPart(123)` is refused here, before
    anything is written, not found later in an unreadable log line.
    """
    if isinstance(message, str):
        if not message:
            raise InputError("a message needs some text")
        check_text(message, "the message")
        check_carried_whole(TextPart(message), "the message")
        return message
    if isinstance(message, Mapping):
        raise InputError(
            "a message is text (a str) or a sequence of TextPart and ImagePart, not a "
            f"{type(message).__name__}: pass the text itself, e.g. send(session, 'hello')"
        )
    if isinstance(message, (bytes, bytearray, memoryview)):
        raise InputError(f"a message is text (a str), not {type(message).__name__}: decode it first")
    try:
        parts: tuple[object, ...] = tuple(message)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(f"a message is text or a sequence of parts, not {type(message).__name__}") from None
    if not parts:
        raise InputError("a message needs at least one part")
    for index, part in enumerate(parts):
        if not isinstance(part, (TextPart, ImagePart)):
            raise InputError(
                f"part {index} is a {type(part).__name__}; a message takes TextPart and ImagePart"
            )
    try:
        checked: tuple[Part, ...] = _parts_decoder.decode(msgspec.json.encode(parts))
    except msgspec.ValidationError as exc:
        raise InputError(f"a malformed message part: {exc}") from None
    except UnicodeEncodeError:
        raise InputError("a message part has text that is not valid Unicode (a lone surrogate)") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"a message part cannot be recorded: {exc}") from None
    for index, part in enumerate(checked):
        if isinstance(part, TextPart):
            check_carried_whole(part, f"text part {index}")
        if isinstance(part, ImagePart):
            if not part.data and not part.url:
                raise InputError(f"image part {index} has neither data nor a url")
            if part.data and not _is_base64(part.data):
                raise InputError(
                    f"image part {index}'s data is not base64 (the image's bytes, encoded, no line breaks)"
                )
            if not part.media_type.startswith("image/"):
                raise InputError(f"image part {index} has media type {part.media_type!r}")
    return checked


def _is_base64(data: str) -> bool:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def check_carried_whole(part: TextPart, what: str) -> None:
    """Refuse text the log would move to a blob (`MessageTooLarge`): the model would see a preview."""
    if oversized(part, BLOB_THRESHOLD):
        size = len(msgspec.json.encode(part))
        raise MessageTooLarge(
            f"{what} encodes to {size:,} bytes, over the {BLOB_THRESHOLD:,} a user message carries whole "
            "(a larger text is stored as a blob, of which the model sees only a preview): split it over "
            "several messages, or put it in a file of the workspace for the tools to read"
        )


def check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode: a lone surrogate at index {exc.start}") from None


def checked_key(key: object) -> str:
    """An idempotency key as sessions record it: a str of 1..256 chars, printable, valid Unicode."""
    if type(key) is not str:
        raise InputError(f"idempotency_key must be a str, got {type(key).__name__}")
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise InputError(f"idempotency_key must be 1..{MAX_KEY_CHARS} chars, got {len(key)}")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in key):
        raise InputError("idempotency_key must not contain control characters or lone surrogates")
    return key


def checked_workspace(workspace: object) -> str:
    """A workspace as sessions record it (absolute, normalized); a str path or an os.PathLike of one."""
    try:
        path = os.fspath(workspace)  # type: ignore[call-overload]
    except TypeError:
        kind = type(workspace).__name__
        raise InputError(f"a workspace is a path (str or os.PathLike), not {kind}") from None
    if not isinstance(path, str):
        raise InputError(f"a workspace is a str path, not {type(path).__name__}: decode it first")
    if not path or "\x00" in path:
        raise InputError(f"a workspace needs a path without NUL characters, not {path!r}")
    check_text(path, "the workspace path")
    return absolute_workspace(path)


def checked_settings(settings: object) -> SessionSettings:
    """Settings for a new session, checked by a round trip (a Struct's types are not checked when built)."""
    if not isinstance(settings, SessionSettings):
        raise InputError(f"settings are a SessionSettings, not {type(settings).__name__}")
    try:
        return _settings_decoder.decode(msgspec.json.encode(settings))
    except msgspec.ValidationError as exc:
        raise InputError(f"malformed settings: {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"settings that cannot be recorded: {exc}") from None


def budget_problem(settings: SessionSettings, fixed_tokens: int) -> str | None:
    """Why these settings leave a session no input budget, or None when they leave one (pure).

    The window must be larger than the output reserve (B1: the cap, else
    10 % of the window, 8,192..32,768) plus the fixed context, the system
    prompt and tool schemas every request sends (P2, `fixed_tokens`): else
    the budget is unknown (B2) or filled before any history, and a session
    would never hand off nor compact. `context_window=None` is the host
    saying it does not know the window: no problem here (L3).
    """
    window = settings.context_window
    if window is None:
        return None
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return f"context_window must be a positive number of tokens or None, got {window!r}"
    cap = settings.max_output_tokens
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 0):
        return f"max_output_tokens must be a non-negative number of tokens or None, got {cap!r}"
    reserve = output_reserve(window, cap)
    assert reserve is not None
    if window > reserve + fixed_tokens:
        return None
    where = "the output cap" if cap is not None else "10 % of the window, at least 8,192"
    return (
        f"context_window={window:,} is not larger than the output reserve ({reserve:,}: {where}) plus "
        f"the system prompt and tool schemas ({fixed_tokens:,} tokens): no input budget is left, so "
        "sessions would never hand off nor compact. Use a larger window, a smaller max_output_tokens, "
        "or context_window=None for a window you do not know"
    )


def check_budget(settings: SessionSettings, fixed_tokens: int) -> None:
    """`NoInputBudget` when `budget_problem` finds one."""
    problem = budget_problem(settings, fixed_tokens)
    if problem is not None:
        raise NoInputBudget(problem)
