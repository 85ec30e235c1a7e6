"""Flexible framing extras (reference section 2): a run of (id, length, data) elements.

Each element starts with one byte whose high nibble is the id and low nibble the length; 15 in either
nibble escapes to one more byte holding ``value - 15`` (id escape first). Parsing never raises: an element
that runs past the end becomes a ``bad_frame_info`` diagnostic and the rest is kept raw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from construct import Struct

from dcpctl.protocol import grammar as g
from dcpctl.protocol.constants import REQUEST_FRAMES, RESPONSE_FRAMES, Vocabulary
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
# Frame ids whose data is text, and those whose data must be empty.
TEXT_FRAMES: Final = frozenset({4, 6})
EMPTY_FRAMES: Final = frozenset({0, 5})
DCP_STREAM_ID: Final = 2


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
            for key in ("server_duration_encoded", "throttle_duration_encoded"):
                if key in out:
                    out[key.replace("_encoded", "_us")] = round((out[key] ** 1.74) / 2, 1)
            return out
        if not response and self.id in TEXT_FRAMES:
            return {"text": self.data.decode("utf-8", "backslashreplace")}
        return {}


def vocabulary(response: bool) -> Vocabulary:
    return RESPONSE_FRAMES if response else REQUEST_FRAMES


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
    else:
        return infos, diags
    diags.append(diagnostic("bad_frame_info", f"frame info at byte {element} runs past the framing "
                            f"extras (ends at byte {end})", element, end - element))
    return infos, diags
