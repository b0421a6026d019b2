"""cairn's vocabulary: messages, event kinds, the line codec and the session fold."""

from cairn.events.codec import GENESIS, Record, decode_envelope, decode_line, encode_line
from cairn.events.errors import CairnError, DecodeError, InputError
from cairn.events.kinds import Event, EventBase
from cairn.events.model import Message, Part, TextPart, ToolCall
from cairn.events.state import SessionState, evolve, replay

__all__ = [
    "GENESIS",
    "CairnError",
    "DecodeError",
    "Event",
    "EventBase",
    "InputError",
    "Message",
    "Part",
    "Record",
    "SessionState",
    "TextPart",
    "ToolCall",
    "decode_envelope",
    "decode_line",
    "encode_line",
    "evolve",
    "replay",
]
