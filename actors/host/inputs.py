"""What `Host.send` is given, checked at the edge: a user message, a workspace path, settings.

Each raises `InputError` saying what was expected, before anything is
written, so a malformed argument never becomes an unreadable log line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from cairn.actors.session.settings import SessionSettings
from cairn.events.errors import InputError
from cairn.events.model import ImagePart, Part, TextPart


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
        if isinstance(part, ImagePart):
            if not part.data and not part.url:
                raise InputError(f"image part {index} has neither data nor a url")
            if not part.media_type.startswith("image/"):
                raise InputError(f"image part {index} has media type {part.media_type!r}")
    return checked


def check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode: a lone surrogate at index {exc.start}") from None


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
