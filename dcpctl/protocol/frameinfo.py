"""Flexible framing extras (reference section 2): a run of (id, length, data) elements.

Each element starts with one byte whose high nibble is the id and low nibble the length; 15 in either
nibble escapes to one more byte holding ``value - 15`` (id escape first). Parsing never raises: an element
that runs past the end becomes a ``bad_frame_info`` diagnostic and the rest is kept raw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from construct import Struct

from dcpctl.protocol import grammar as g
from dcpctl.protocol.constants import DURABILITY_LEVELS, REQUEST_FRAMES, RESPONSE_FRAMES, Vocabulary
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic

# id -> the grammar of its data, for requests (client or DCP producer) and responses.
REQUEST_FRAME_GRAMMARS: Final[Mapping[int, Mapping[int, Struct]]] = {
    1: {1: g.durability_frame, 3: g.durability_timeout_frame},
    2: {2: g.stream_id_frame},
    7: {2: g.impersonate_token_frame},
}
RESPONSE_FRAME_GRAMMARS: Final[Mapping[int, Mapping[int, Struct]]] = {
    0: {2: g.server_duration_frame},
    1: {2: g.read_units_frame},
    2: {2: g.write_units_frame},
    3: {2: g.throttle_duration_frame},
}
# Frame ids whose data is text (the retired tracing context, the impersonated user, an extra privilege), and
# those whose data must be empty (barrier, preserve TTL).
TEXT_FRAMES: Final = frozenset({3, 4, 6})
EMPTY_FRAMES: Final = frozenset({0, 5})
NAME_FRAMES: Final = frozenset({4, 6})  # of those, a name: the user a request acts for, a privilege
DCP_STREAM_ID: Final = 2
IMPERSONATE_USER: Final = 4  # a request's: the user name it acts for (``^name``: an external user)
DURABILITY: Final = 1
# Response frame fields kv_engine encodes as variable-precision durations (cb::tracing::Tracer::encodeMicros).
ENCODED_DURATIONS: Final = ("server_duration_encoded", "throttle_duration_encoded")
# A durability timeout of 0 or 0xffff is reserved: kv_engine answers Einval (docs/BinaryProtocol.md, ID:1).
RESERVED_DURABILITY_TIMEOUTS: Final = frozenset({0, 0xFFFF})


# The largest encoded duration: the frame's two bytes (about 120 seconds; longer durations say this).
MAX_ENCODED_DURATION: Final = 0xFFFF
SERVER_DURATION: Final = 0  # a response's frame id: the server's receive-to-send time (HELLO Tracing)


def encode_micros(micros: int) -> int:
    """A duration in microseconds as kv_engine's ``Tracer::encodeMicros`` sends it, ``(µs * 2) ** (1 / 1.74)``
    rounded, at most :data:`MAX_ENCODED_DURATION` (reference 2.3)."""
    return min(MAX_ENCODED_DURATION, round(math.pow(max(0, micros) * 2, 1 / 1.74)))


def decode_micros(encoded: int) -> int:
    """Microseconds of a variable-precision duration, as kv_engine's ``Tracer::decodeMicros`` reads them:
    ``encoded ** 1.74 / 2``, truncated to a whole microsecond."""
    return int(encoded ** 1.74 / 2)


@dataclass(frozen=True, slots=True)
class FrameInfo:
    id: int
    data: bytes
    offset: int  # of the element's first byte within the packet
    length: int  # whole element, escapes included

    def fields(self, response: bool) -> dict[str, Any]:
        grammars = RESPONSE_FRAME_GRAMMARS if response else REQUEST_FRAME_GRAMMARS
        grammar = grammars.get(self.id, {}).get(len(self.data))
        if grammar is not None:
            parsed = grammar.parse(self.data)
            out = {k: v for k, v in parsed.items() if not k.startswith("_")}
            for key in ENCODED_DURATIONS:
                if key in out:
                    out[key.replace("_encoded", "_us")] = decode_micros(out[key])
            if "durability_level" in out:
                out["durability_level_name"] = DURABILITY_LEVELS.name(out["durability_level"])
            return out
        if not response and self.id in TEXT_FRAMES:
            return {"text": self.data.decode("utf-8", "backslashreplace")}
        return {}


def vocabulary(response: bool) -> Vocabulary:
    return RESPONSE_FRAMES if response else REQUEST_FRAMES


def declared(frame_id: int, response: bool) -> bool:
    """Whether a frame info id is one kv_engine defines for a request (or a response): its data has a meaning."""
    return frame_id in vocabulary(response).name_of


def protocol_data(info: FrameInfo, response: bool, names: bool = True) -> bool:
    """Whether a frame info's data is the protocol's own, as kv_engine reads it: an id's data at a length its
    grammar reads, an empty one where the id takes none, or (``names``) a name (the impersonated user, an
    extra privilege). The retired tracing context, an undeclared id or a length its id does not take: not."""
    grammars = RESPONSE_FRAME_GRAMMARS if response else REQUEST_FRAME_GRAMMARS
    if len(info.data) in grammars.get(info.id, {}):
        return True
    if response:
        return False
    return (info.id in EMPTY_FRAMES and not info.data) or (names and info.id in NAME_FRAMES)


def encode_element(frame_id: int, data: bytes) -> bytes:
    """Canonical (shortest) encoding of one element."""
    length = len(data)
    first = (min(frame_id, 15) << 4) | min(length, 15)
    out = bytearray([first])
    if frame_id >= 15:
        out.append(frame_id - 15)
    if length >= 15:
        out.append(length - 15)
    return bytes(out) + data


def parse(buf: bytes, start: int, end: int, response: bool) -> tuple[list[FrameInfo], list[Diagnostic]]:
    """Parse ``buf[start:end]`` into frame infos plus diagnostics."""
    infos: list[FrameInfo] = []
    diags: list[Diagnostic] = []
    pos = start
    grammars = RESPONSE_FRAME_GRAMMARS if response else REQUEST_FRAME_GRAMMARS
    known = RESPONSE_FRAMES if response else REQUEST_FRAMES
    while pos < end:
        element = pos
        frame_id, length = buf[pos] >> 4, buf[pos] & 0x0F
        pos += 1
        if frame_id == 15:
            if pos >= end:
                break
            frame_id = 15 + buf[pos]
            pos += 1
        if length == 15:
            if pos >= end:
                break
            length = 15 + buf[pos]
            pos += 1
        if pos + length > end:
            break
        info = FrameInfo(frame_id, bytes(buf[pos:pos + length]), element, pos + length - element)
        infos.append(info)
        pos += length
        if encode_element(frame_id, info.data) != bytes(buf[element:pos]):
            diags.append(diagnostic("non_canonical_frame_info",
                                    f"frame info {frame_id} uses a longer encoding than needed",
                                    element, info.length))
        if frame_id not in known.name_of:
            diags.append(diagnostic("unknown_frame_info", f"frame info id {frame_id} is not defined",
                                    element, info.length))
        elif frame_id in grammars and length not in grammars[frame_id]:
            allowed = "/".join(str(n) for n in grammars[frame_id])
            diags.append(diagnostic("illegal_frame_info_length",
                                    f"frame info {known.name(frame_id)} has length {length}, "
                                    f"must be {allowed}", element, info.length))
        elif not response and frame_id in EMPTY_FRAMES and length:
            diags.append(diagnostic("illegal_frame_info_length",
                                    f"frame info {known.name(frame_id)} must be empty", element,
                                    info.length))
        if not response and frame_id == DCP_STREAM_ID and info.data == b"\x00\x00":
            diags.append(diagnostic("stream_id_zero", "DCP stream id 0 is invalid", element, info.length))
        if not response and frame_id == DURABILITY and length in grammars[DURABILITY]:
            _durability(info, diags)
    else:
        return infos, diags
    diags.append(diagnostic("bad_frame_info", f"frame info at byte {element} runs past the framing "
                            f"extras (ends at byte {end})", element, end - element))
    return infos, diags


def _durability(info: FrameInfo, diags: list[Diagnostic]) -> None:
    level = info.data[0]
    if level not in DURABILITY_LEVELS.name_of:
        diags.append(diagnostic("invalid_durability_level", f"durability level {level} is not defined (1 Majority, "
                                "2 MajorityAndPersistOnMaster, 3 PersistToMajority)", info.offset, info.length))
    if len(info.data) == 3 and int.from_bytes(info.data[1:], "big") in RESERVED_DURABILITY_TIMEOUTS:
        diags.append(diagnostic("reserved_durability_timeout", f"durability timeout "
                                f"{int.from_bytes(info.data[1:], 'big')} ms is reserved (0 and 65535); the server "
                                "answers Einval", info.offset, info.length))
