"""cairn's vocabulary: messages, event kinds, the line codec and the session fold."""

from events.codec import GENESIS, Record, decode_envelope, decode_line, encode_line
from events.errors import CairnError, DecodeError, InputError
from events.kinds import Event, EventBase
from events.model import Message, Part, TextPart, ToolCall
from events.state import SessionState, evolve, replay

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
