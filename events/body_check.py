"""The write-side check of an event: what the log writes must read back equal (`checked_body`).

msgspec checks no types when a Struct is built, and its JSON encoder turns
NaN and infinities into null; so before a body is framed into a line it is
encoded, decoded back with its kind's typed decoder and compared. An event
that would not read back equal is refused with an `InvalidEvent` that names
the field's `$.path` and says why (the refusal explanations below run only
then, off the hot path). The journal's writer runs `checked_body` once per
appended event; `events.codec.encode_line` runs it too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import msgspec
import msgspec.inspect

from cairn.events.errors import InvalidEvent
from cairn.events.kinds import EVENT_TYPES, EventBase, kind_name, raw_object_problem

_body_encoder = msgspec.json.Encoder()


def _holds_raw(info: msgspec.inspect.Type, seen: set[type]) -> bool:
    """Whether a value of this type may hold a msgspec.Raw (written into a line as it is)."""
    if isinstance(info, msgspec.inspect.RawType):
        return True
    if isinstance(info, msgspec.inspect.StructType):
        if info.cls in seen:
            return False
        seen.add(info.cls)
        return any(_holds_raw(field.type, seen) for field in info.fields)
    inner: list[msgspec.inspect.Type] = []
    for name in ("item_type", "key_type", "value_type"):
        if isinstance(getattr(info, name, None), msgspec.inspect.Type):
            inner.append(getattr(info, name))
    for name in ("types", "item_types"):
        inner.extend(getattr(info, name, ()))
    return any(_holds_raw(item, seen) for item in inner)


#: the kinds with a Raw field somewhere (the hand-off): their bodies are scanned for line breaks
_RAW_KINDS: frozenset[type] = frozenset(
    cls for cls in EVENT_TYPES if _holds_raw(msgspec.inspect.type_info(cls), set())
)
#: each kind's typed decoder, for the round trip of `checked_body`
_BODY_DECODERS: dict[type, Callable[[bytes], EventBase]] = {
    cls: msgspec.json.Decoder(cls).decode for cls in EVENT_TYPES
}


def checked_body(event: EventBase) -> tuple[EventBase, bytes]:
    """The event as the log will read it back, and its body: refuse what would not read back equal.

    msgspec checks no types at construction, and its encoder turns NaN and
    infinities into null; so the body is encoded, decoded back with the kind's
    typed decoder (its types, its `Int64` bounds, its `__post_init__`
    invariants) and the result must equal the event. Returns the decoded
    copy, which holds exactly the types a later read gives (plain str and
    int, tuples), and the body to frame. Raises `InvalidEvent`, naming the
    field's `$.path`, for anything else: not an event, a field of the wrong
    type, a non-finite number, a lone surrogate, an int outside 64 bits, a
    list where the schema has a tuple, a value with no JSON form.
    """
    decode = _BODY_DECODERS.get(type(event))
    if decode is None:  # the event classes themselves: a subclass would encode another tag
        raise InvalidEvent(f"not an event: {type(event).__name__}")
    try:
        body = _body_encoder.encode(event)
        stored: EventBase = decode(body)
        same = stored == event
    except Exception as exc:  # msgspec's errors are ValueErrors; a value's own __eq__ may raise anything
        raise _refusal(event, exc) from None
    if not same:
        raise _refusal(event, None, stored)
    # msgspec escapes every control character of a string: only a Raw value could put a CR or LF
    # in the body, where it would split the line
    if type(event) in _RAW_KINDS and (b"\n" in body or b"\r" in body):
        raise InvalidEvent(f"{kind_name(event)} event: a raw line break in its JSON")
    return stored, body


def _refusal(event: EventBase, error: BaseException | None, stored: object = None) -> InvalidEvent:
    """The InvalidEvent for an event that failed `checked_body`: its kind, the field's path and why.

    The slow path: values msgspec would silently change or cannot encode are
    named first (they explain the decode error they cause), then msgspec's
    own message with its `$.path`, then the first field that read back
    different.
    """
    kind = kind_name(event)
    try:
        found = _bad_value(event, "$")
        if found is None and isinstance(error, msgspec.ValidationError):
            text = str(error)
            match = _MSGSPEC_PATH.search(text)
            return InvalidEvent(f"{kind} event: {text}", path=match.group(1) if match else "")
        if found is None and error is None:
            found = _first_difference(event, stored, "$")
    except RecursionError:  # a container that holds itself
        return InvalidEvent(f"{kind} event: nested too deeply (or holds itself)")
    except Exception as exc:  # a value whose own methods fail: the refusal must not
        return InvalidEvent(f"{kind} event: cannot be stored ({type(exc).__name__}: {exc})")
    if found is None:
        why = "does not read back equal" if error is None else f"{type(error).__name__}: {error}"
        found = ("", f"cannot be stored ({why})")
    path, problem = found
    return InvalidEvent(f"{kind} event: {problem}" + (f" - at `{path}`" if path else ""), path=path)


_MSGSPEC_PATH = re.compile(r"at `(\$[^`]*)`$")
#: what the walkers below look into rather than try to encode
_CONTAINERS = (msgspec.Struct, list, tuple, dict)


def _children(value: object, path: str) -> list[tuple[str, object]]:
    """The named parts of a Struct, list, tuple or dict, with their paths (none for a leaf)."""
    if isinstance(value, msgspec.Struct):  # an UNSET field is left out of the line, as msgspec does
        fields = [(name, getattr(value, name)) for name in value.__struct_fields__]
        return [(f"{path}.{name}", field) for name, field in fields if field is not msgspec.UNSET]
    if isinstance(value, list | tuple):
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return [(f"{path}[{key!r}]", item) for key, item in value.items()]
    return []


def _bad_value(value: object, path: str) -> tuple[str, str] | None:
    """The first value in `value` that cannot read back: non-finite float, lone surrogate, no JSON form."""
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return path, f"non-finite number {value!r} (JSON has none: it would be stored as null)"
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            return path, (
                f"lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start} "
                "(not valid Unicode: UTF-8 cannot hold it)"
            )
    elif isinstance(value, msgspec.Raw):
        problem = raw_object_problem(value)
        return None if problem is None else (path, problem)
    elif isinstance(value, dict):
        for key in value:
            found = _bad_value(key, f"{path} key {key!r}")
            if found is not None:
                return found
    for child_path, child in _children(value, path):
        found = _bad_value(child, child_path)
        if found is not None:
            return found
    if type(value) not in (str, int, bool, type(None)) and not isinstance(value, _CONTAINERS):
        try:
            _body_encoder.encode(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return path, f"a {type(value).__name__}, which has no JSON form ({exc})"
    return None


def _first_difference(original: object, stored: object, path: str) -> tuple[str, str] | None:
    """Where `stored` (the decoded copy) first differs from `original`, and how."""
    if original == stored:
        return None
    if type(original) is not type(stored):
        return path, f"a {type(original).__name__} where the schema reads back a {type(stored).__name__}"
    theirs = _children(original, path)
    ours = _children(stored, path)
    if len(theirs) != len(ours):
        return path, f"{len(theirs)} items read back as {len(ours)}"
    for (child_path, left), (_, right) in zip(theirs, ours, strict=True):
        found = _first_difference(left, right, child_path)
        if found is not None:
            return found
    return path, f"{_shown(original)} reads back as {_shown(stored)}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
