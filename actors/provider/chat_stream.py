"""Streamed chat-completion chunks into provider output (pure, no I/O).

`ChunkAssembler.feed(chunk)` takes one decoded chunk (the SDK's model or a
plain dict) and returns the output it completes; `end()` is called when the
stream ends and returns the closing `UsageReport` and `Finished`. Rules:

| in a chunk (first choice only)            | output                                             |
|-------------------------------------------|----------------------------------------------------|
| `delta.reasoning_content` or `.reasoning` | `ReasoningDelta` (one of the two, never both)      |
| `delta.content`, `delta.refusal`          | `TextDelta`                                        |
| `delta.tool_calls[]` fragments            | kept until the finish reason (see below)           |
| `finish_reason`                           | every tool call, in order, as `ToolCallReady`      |
| `usage` (any chunk, the last one wins)    | kept for `end()`                                   |
| stream end with a finish reason           | `UsageReport` (fields None when absent), `Finished`|
| stream end without one                    | `TruncatedStream`                                  |
| not an object, `choices` not a list, ...  | `MalformedChunk`                                   |

Tool calls are assembled by `index`: the first fragment of an index brings
the id and the name, later ones more of the argument string. A fragment
with a different id on a used index starts a new call (servers that number
every call 0); a fragment without an index starts a new call when it has an
id or a name and continues the last call otherwise. A call without an id
gets one from `new_call_id`; a call without a name is malformed.

Usage fields are passed through only when they are non-negative integers
(P1 decides later what a partial usage is worth).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cairn.actors.provider.base import (
    Finished,
    ProviderOutput,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.events.errors import InputError
from cairn.events.model import ToolCall


class MalformedChunk(InputError):
    """A chunk the protocol does not allow (not an object, wrong field types, a nameless call).

    The server is at fault; `chat_errors.to_failure` turns it into a `server` failure.
    """


class TruncatedStream(InputError):
    """The stream ended before the model gave a finish reason.

    The server (or the network) is at fault; `chat_errors.to_failure` turns it into a
    retryable `network` failure.
    """


def field_of(obj: object, name: str) -> object:
    """`obj[name]` of a mapping, else the attribute (None when absent): SDK objects and dicts alike."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def is_object(obj: object) -> bool:
    """Whether `obj` is a mapping or an object with fields (not a scalar, list or None)."""
    if isinstance(obj, Mapping):
        return True
    scalar = obj is None or isinstance(obj, str | bytes | int | float | list | tuple)
    return not scalar and hasattr(obj, "__dict__")


def count_of(value: object) -> int | None:
    """`value` when it is a usable token count (an int, not a bool, 0 or more), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_report(usage: object) -> UsageReport:
    """The usable fields of a usage object; every field None when there is none."""
    if not is_object(usage):
        return UsageReport()
    details = field_of(usage, "prompt_tokens_details")
    cached = count_of(field_of(details, "cached_tokens")) if is_object(details) else None
    return UsageReport(
        prompt_tokens=count_of(field_of(usage, "prompt_tokens")),
        completion_tokens=count_of(field_of(usage, "completion_tokens")),
        total_tokens=count_of(field_of(usage, "total_tokens")),
        cached_prompt_tokens=cached,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedChunk(f"{what} is not a string")
    return value


class ChunkAssembler:
    """Turns the chunks of one streamed completion into provider output. One per request."""

    def __init__(self, new_call_id: Callable[[int], str]) -> None:
        self._new_call_id = new_call_id
        self._calls: list[_PartialCall] = []
        self._by_index: dict[int, int] = {}
        self._usage: object = None
        self._finish: str | None = None
        self._released = False

    @property
    def finish_reason(self) -> str | None:
        return self._finish

    def feed(self, chunk: object) -> list[ProviderOutput]:
        if not is_object(chunk):
            raise MalformedChunk(f"a chunk is not a JSON object: {type(chunk).__name__}")
        usage = field_of(chunk, "usage")
        if usage is not None:
            self._usage = usage
        choices = field_of(chunk, "choices")
        if choices is None:
            return []
        if not isinstance(choices, list):
            raise MalformedChunk("`choices` is not a list")
        out: list[ProviderOutput] = []
        for choice in choices:
            if not is_object(choice):
                raise MalformedChunk("a choice is not an object")
            index = field_of(choice, "index")
            if index not in (None, 0):
                continue  # we never ask for n > 1
            delta = field_of(choice, "delta")
            if delta is not None:
                if not is_object(delta):
                    raise MalformedChunk("`delta` is not an object")
                out.extend(self._delta(delta))
            finish = field_of(choice, "finish_reason")
            if finish is not None:
                self._finish = _text(finish, "`finish_reason`")
                out.extend(self._release_calls())
        return out

    def end(self) -> list[ProviderOutput]:
        """At the end of the stream: the usage and the finish, or `TruncatedStream`."""
        if self._finish is None:
            raise TruncatedStream("the stream ended before the model gave a finish reason")
        return [*self._release_calls(), usage_report(self._usage), Finished(self._finish)]

    def _delta(self, delta: object) -> list[ProviderOutput]:
        out: list[ProviderOutput] = []
        reasoning = _text(field_of(delta, "reasoning_content"), "`reasoning_content`") or _text(
            field_of(delta, "reasoning"), "`reasoning`"
        )
        if reasoning:
            out.append(ReasoningDelta(reasoning))
        for key in ("content", "refusal"):
            text = _text(field_of(delta, key), f"`{key}`")
            if text:
                out.append(TextDelta(text))
        fragments = field_of(delta, "tool_calls")
        if fragments is None:
            return out
        if not isinstance(fragments, list):
            raise MalformedChunk("`tool_calls` is not a list")
        if self._released:
            return out  # fragments after the finish reason: nothing can still use them
        for fragment in fragments:
            self._fragment(fragment)
        return out

    def _fragment(self, fragment: object) -> None:
        if not is_object(fragment):
            raise MalformedChunk("a tool-call fragment is not an object")
        call_id = _text(field_of(fragment, "id"), "a tool call's `id`")
        function = field_of(fragment, "function")
        if function is not None and not is_object(function):
            raise MalformedChunk("a tool call's `function` is not an object")
        name = arguments = ""
        if function is not None:
            name = _text(field_of(function, "name"), "a tool call's name")
            arguments = _text(field_of(function, "arguments"), "a tool call's arguments")
        index = field_of(fragment, "index")
        if isinstance(index, bool) or not isinstance(index, int | None):
            raise MalformedChunk("a tool call's `index` is not an integer")
        slot: int
        if index is None:
            if call_id or name or not self._calls:
                self._calls.append(_PartialCall())
            slot = len(self._calls) - 1
        else:
            known = self._by_index.get(index)
            if known is None or (call_id and self._calls[known].id and call_id != self._calls[known].id):
                self._calls.append(_PartialCall())
                known = len(self._calls) - 1
                self._by_index[index] = known
            slot = known
        partial = self._calls[slot]
        if call_id and not partial.id:
            partial.id = call_id
        if name and not partial.name:
            partial.name = name
        if arguments:
            partial.arguments.append(arguments)

    def _release_calls(self) -> list[ProviderOutput]:
        if self._released:
            return []
        self._released = True
        ready: list[ProviderOutput] = []
        for position, partial in enumerate(self._calls):
            if not partial.name:
                raise MalformedChunk(f"tool call {position} has no function name")
            call_id = partial.id or self._new_call_id(position)
            ready.append(ToolCallReady(ToolCall(call_id, partial.name, "".join(partial.arguments) or "{}")))
        return ready
