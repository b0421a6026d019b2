"""The crc field that ends every log line: its layout, and checking the fields of many lines at once.

`events.codec` frames and checks one line with these; readers in bulk
(`store.reader`, `codec.decode_run`) check a whole run with `frames_sound`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence

import crc32c

CRC_SUFFIX_LEN = len(b',"crc":"00000000"}')  # 18
#: a line's last 19 bytes, given the crc of what comes before them
CRC_SUFFIX_FORMAT = b',"crc":"%08x"}\n'
CRC_HEX = re.compile(rb"[0-9a-f]{8}")
CRC_SUFFIX_HEAD = b',"crc":"'

#: a line's last 19 bytes with its crc's 8 hex digits left out, and where those digits go
_SUFFIX_FRAME = CRC_SUFFIX_HEAD + b'"}\n'
_HEX_AT = len(CRC_SUFFIX_HEAD)
_SUFFIX_WIDTH = CRC_SUFFIX_LEN + 1


def frames_sound(
    run: bytes,
    lengths: Sequence[int],
    *,
    _crc: Callable[[bytes], int] = crc32c.crc32c,
) -> bool:
    """Whether `run` is exactly lines of these lengths, each ending in the crc field its bytes give.

    Each line must be longer than its crc field and end in `,"crc":"`, the
    8 lowercase hex digits of the CRC-32C of every byte before that, `"}`
    and a newline. One pass takes each line's CRC and last 19 bytes; those
    are then compared, all lines at once, column by column with what they
    must hold (no formatting of a crc field per line).
    """
    if len(run) != sum(lengths):
        return False
    crcs: list[int] = []
    tails: list[bytes] = []
    add_crc = crcs.append
    add_tail = tails.append
    end = 0
    for length in lengths:
        start = end
        end += length
        cut = end - _SUFFIX_WIDTH
        if cut <= start:
            return False
        add_crc(_crc(run[start:cut]))
        add_tail(run[cut:end])
    return crc_fields_match(crcs, tails)


def crc_fields_match(
    crcs: Sequence[int], tails: Sequence[bytes], *, _pack: Callable[..., bytes] = struct.pack
) -> bool:
    """Whether each of `tails` (a line's last 19 bytes) is the crc field of its line's CRC in `crcs`
    (`,"crc":"`, the CRC's 8 lowercase hex digits, `"}`, a newline): all lines compared at once,
    column by column, instead of formatting one crc field per line."""
    count = len(crcs)
    if len(tails) != count:
        return False
    digits = _pack(f">{count}I", *crcs).hex().encode()
    joined = b"".join(tails)
    if len(joined) != count * _SUFFIX_WIDTH:
        return False
    for column in range(_SUFFIX_WIDTH):
        if _HEX_AT <= column < _HEX_AT + 8:
            wanted = digits[column - _HEX_AT :: 8]
        else:
            at = column if column < _HEX_AT else column - 8
            wanted = _SUFFIX_FRAME[at : at + 1] * count
        if joined[column::_SUFFIX_WIDTH] != wanted:
            return False
    return True
