"""The human renderer (rich): one headline per message, its fields, key, value and diagnostics.

Every string from the wire (keys, values, xattrs, names a server gave, diagnostics) is escaped
(``safetext``): on a terminal an ESC could retitle the window or clear the screen, a newline forge a line.
A string longer than the bound (``--max-field-bytes``) shows its head, its tail and its length.

For people, not programs: ``ts`` is an ISO-8601 time, a value the protocol gives a meaning of its own (an
end seqno of 2**64-1 is "no end") is said by name (:data:`NAMED_VALUES`), and each line wraps under its own
first column. JSON output keeps every value as it was on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from rich.console import Group
from rich.text import Text

from dcpctl.dcp.rollback import END_FOREVER
from dcpctl.protocol.frameinfo import DCP_STREAM_ID
from dcpctl.protocol.message import Message
from dcpctl.protocol.naming import value_names
from dcpctl.protocol.registry import Pushed
from dcpctl.render.record import CUT_OPCODE
from dcpctl.render.wrap import Hanging
from dcpctl.safetext import shown

XATTRS_SHOWN: Final = 32  # xattr lines per message; a document rarely has more, a hostile one has millions
SEVERITY_STYLE: Final = {"error": "bold red", "warning": "yellow", "note": "cyan"}
_HEADLINE: Final = {"offset", "magic", "opcode", "vbucket", "status", "opaque", "cas", "datatype",
                    "key_length", "extras_length", "framing_extras_length", "total_body_length",
                    "frame_infos", "stream_id", "key", "key_encoding", "collection_id", "value",
                    "value_encoding", "value_compressed", "xattrs", "diagnostics", "ts", "connection",
                    "direction", "request_type", "request_type_name", "frames"}
INDENT: Final = 4  # a message's lines under its headline, and where a wrapped line continues
# Ids the manifest, ns_server and kv_engine's logs write in hex (as the key line's "cid 0x8"): shown so
HEX_IDS: Final = frozenset({"collection_id", "scope_id", "manifest_uid", "flush_uid"})


@dataclass(frozen=True, slots=True)
class Named:
    """A field's value that the protocol gives a meaning of its own, and how pretty output says it."""

    value: int
    text: str
    opcodes: frozenset[str] = frozenset()  # only in these messages (empty: wherever the field is)


_STREAM_REQUESTS: Final = frozenset({"DCP_STREAM_REQ", "UPR_REQUEST"})
_ARITHMETIC: Final = frozenset({"INCREMENT", "INCREMENTQ", "DECREMENT", "DECREMENTQ"})
# An arithmetic command's expiration of all one-bits: fail with KeyEnoent rather than create the counter from
# its initial value (the memcached binary protocol's Increment/Decrement, kept by kv_engine): not a date in 2106
NO_CREATE_EXPIRATION: Final = 0xFFFFFFFF
# The special values of the reference (dcp-reference.md) a person would otherwise read as a number: an end
# seqno of 18446744073709551615 looks like a seqno, a uuid of 0 like a uuid. Keyed by the JSON field name.
NAMED_VALUES: Final[Mapping[str, tuple[Named, ...]]] = {
    "end_seqno": (Named(END_FOREVER, "max (no end)"),),  # §3.4.1: 0xffffffffffffffff streams forever
    "start_seqno": (Named(0, "0 (from the beginning)", _STREAM_REQUESTS),),  # the client has no item yet
    "vbucket_uuid": (Named(0, "0 (no history)", _STREAM_REQUESTS),),  # §3.4.1: 0 = "I have nothing"
    "rollback_seqno": (Named(0, "0 (everything: start again from the beginning)"),),  # §9: purged past start
    "expiration": (Named(0, "0 (never)"),  # §3.9: absolute epoch seconds, 0 = none
                   Named(NO_CREATE_EXPIRATION, f"{NO_CREATE_EXPIRATION} (do not create: fails if missing)",
                         _ARITHMETIC)),
    "lock_time": (Named(0, "0 (not locked)"),),  # §3.9: the server sends 0
}
# Fields holding absolute epoch seconds (§3.9, §3.10): shown with their time, as ts is.
EPOCH_SECONDS: Final = frozenset({"expiration", "delete_time"})
# An expiration a client sends of at most 30 days is relative, seconds from the request (memcached's rule,
# which kv_engine keeps); above, an epoch time. DCP items carry the server's absolute time whatever its size.
RELATIVE_EXPIRATION_MAX: Final = 30 * 24 * 3600


def iso_time(ts: float, *, local: bool = False) -> str:
    """``ts`` (seconds since the epoch) as ISO-8601 to the microsecond: UTC with ``Z``, or with ``local``
    the local time with its offset. A time no date can hold (a capture's hostile timestamp) stays seconds."""
    try:
        when = datetime.fromtimestamp(ts, UTC)
        text = (when.astimezone() if local else when).isoformat(timespec="microseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.6f}"
    return text if local else text.removesuffix("+00:00") + "Z"


def named(opcode: object, name: str, value: object) -> str | None:
    """The name :data:`NAMED_VALUES` gives this field's value in this message, if any."""
    for entry in NAMED_VALUES.get(name, ()):
        if value == entry.value and type(value) is int and (not entry.opcodes or opcode in entry.opcodes):
            return entry.text
    return None


def _meaning(msg: Message, name: str, value: Any) -> str:
    return "|".join(value_names(msg, name, value))


# How a frame info's fields (FrameInfo.fields, the JSON record's) read in one line: a field a sibling says
# better is shown by that sibling, in its place (an encoded duration by its microseconds, a level by its
# name), and a unit is said where the field's name only implies it.
_FRAME_FIELD_SHOWN_AS: Final = {"server_duration_encoded": "server_duration_us",
                                "throttle_duration_encoded": "throttle_duration_us",
                                "durability_level": "durability_level_name"}
_FRAME_FIELD_LABELS: Final = {"durability_level_name": "durability", "durability_timeout": "timeout",
                              "server_duration_us": "server_duration", "throttle_duration_us": "throttle_duration",
                              "text": ""}
_FRAME_FIELD_UNITS: Final = {"durability_timeout": "ms", "server_duration_us": "µs", "throttle_duration_us": "µs"}
_FRAME_INFO_KEYS: Final = frozenset({"id", "name", "data", *_FRAME_FIELD_SHOWN_AS.values()})


def _frame_info(info: Mapping[str, Any], bound: int) -> str:
    """One frame info as ``server_duration 1509µs`` or ``Impersonate bob``; its name and data when it has
    no declared fields (a barrier, an unknown id)."""
    parts = []
    for field in info:
        if field in _FRAME_INFO_KEYS:
            continue
        name = _FRAME_FIELD_SHOWN_AS[field] if _FRAME_FIELD_SHOWN_AS.get(field) in info else field
        label = _FRAME_FIELD_LABELS.get(name, name)
        parts.append(f"{label} " * bool(label) + _shown(info[name], bound) + _FRAME_FIELD_UNITS.get(name, ""))
    if "text" in info or not parts:
        parts.insert(0, shown(str(info["name"])))
        if len(parts) == 1 and info.get("data"):
            parts.append(_cut(info["data"], bound))
    return " ".join(parts)


def _cut(text: str, bound: int) -> str:
    """``text`` escaped, its middle left out when it is longer than ``bound`` characters."""
    if len(text) <= bound:
        return shown(text)
    half = max(bound // 2, 1)
    return f"{shown(text[:half])}… ({len(text)} chars) …{shown(text[-half:])}"


def _shown(value: Any, bound: int) -> str:
    if isinstance(value, list | dict):
        return _cut(json.dumps(value, separators=(",", ":")), bound)
    return _cut(str(value), bound)


_STAT_SHOWN: Final = frozenset({"key", "key_encoding", "value", "value_encoding", "stat_end", "diagnostics",
                                 "key_length", "total_body_length", "extras_length"})


def _stat_line(record: dict[str, Any], bound: int) -> list[Hanging]:
    """A STAT response as ``name = text`` (names and texts not UTF-8 shown as hex), or the end of the group;
    its diagnostics, if any, under it."""
    out = Text()
    if record.get("stat_end"):
        out.append("end of stats", style="dim")
    else:
        name = _cut(record.get("key", ""), bound)
        out.append(f"hex:{name}" if record.get("key_encoding") == "hex" else name, style="bold")
        value = _cut(record.get("value", ""), bound)
        out.append(" = ", style="dim").append(f"hex:{value}" if record.get("value_encoding") == "hex" else value)
    rest = [(k, v) for k, v in record.items() if k not in _HEADLINE and k not in _STAT_SHOWN]
    for name, value in rest:  # what the tracker adds (latency_ms...), after the stat
        out.append(f" {shown(name)}={_shown(value, bound)}", style="dim")
    lines = [Hanging(out, indent=INDENT)]
    for diag in record["diagnostics"]:
        text = Text(f"{diag['severity']} {diag['name']}: ", style=SEVERITY_STYLE.get(diag["severity"], ""))
        lines.append(Hanging(text.append(shown(diag["message"])), indent=INDENT))
    return lines


def render(msg: Message, record: dict[str, Any], max_field_bytes: int, *, local_time: bool = False) -> Group:
    """The headline, then the message's lines under it; ``local_time``: ts in the local zone, not UTC."""
    text = Text()
    lines = [Hanging(text, hang=INDENT)]

    def line() -> Text:
        lines.append(Hanging(out := Text(), indent=INDENT))
        return out

    if isinstance(record.get("ts"), float | int):
        text.append(iso_time(record["ts"], local=local_time) + " ", style="dim")
    if "connection" in record:
        text.append(f"{record['connection']} {record.get('direction', '')} ", style="dim")
    text.append(f"@{record['offset']} ", style="dim")
    opcode = record.get("opcode", CUT_OPCODE)
    text.append(shown(opcode), style="bold magenta" if msg.is_response else "bold green")
    if "request_type_name" in record:
        text.append(f" ({shown(record['request_type_name'])})", style="magenta")
    if "status" in record:
        style = "green" if record["status"] == "Success" else "bold red"
        text.append(" status ").append(shown(record["status"]), style=style)
    elif "vbucket" in record:
        text.append(f" vb {record['vbucket']}")
    if "opaque" in record:  # (a packet cut short inside its header may lack it)
        text.append(f" opaque 0x{record['opaque']:08x}", style="dim")
    if record.get("cas"):
        text.append(f" cas 0x{record['cas']:016x}", style="dim")
    if "stream_id" in record:
        text.append(f" sid {record['stream_id']}", style="cyan")
    if record.get("datatype"):
        text.append(" " + _meaning(msg, "datatype", record["datatype"]), style="blue")
    if opcode == "STAT" and msg.is_response and record.get("status") == "Success":
        # one line per stat: its name (the key) and its text (the value), or the group's end
        return Group(*lines, *_stat_line(record, max_field_bytes))
    # a collection id is shown with the key it prefixes; without a key (a dropped collection's event, a
    # GET_RANDOM_KEY) among the fields
    fields = [(k, v) for k, v in record.items()
              if k not in _HEADLINE or (k == "collection_id" and "key" not in record)]
    # the 30-day rule is a client's (SET, TOUCH); an item a producer pushes holds an epoch time (§3.9)
    relative = not msg.is_response and msg.spec is not None and msg.spec.pushed is Pushed.NO
    if fields:
        out = line()
        for number, (name, value) in enumerate(fields):
            meaning = _meaning(msg, name, value)
            called = named(opcode, name, value)  # a value of its own meaning is no time either
            if called is not None:
                pass
            elif name == "expiration" and relative and isinstance(value, int) and 0 < value <= RELATIVE_EXPIRATION_MAX:
                meaning = f"in {value} s"
            elif name in EPOCH_SECONDS and isinstance(value, int) and value:
                meaning = iso_time(value, local=local_time).replace(".000000", "")
            out.append(f"{' ' if number else ''}{shown(name)}=", style="dim")
            out.append(called or (f"0x{value:x}" if name in HEX_IDS and type(value) is int
                                  else _shown(value, max_field_bytes)))
            if meaning:
                out.append(f" ({shown(meaning)})", style="dim")
    # a request's stream id is in the headline already
    infos = [_frame_info(info, max_field_bytes) for info in record.get("frame_infos", ())
             if not (info["id"] == DCP_STREAM_ID and "stream_id" in info and not msg.is_response)]
    if infos:
        line().append("frame infos ", style="dim").append(", ".join(infos))
    if "key" in record:
        # a STAT request's key names the stat group
        text = line().append("group " if opcode == "STAT" and not msg.is_response else "key ",
                             style="dim")
        if "collection_id" in record:
            text.append(f"[cid 0x{record['collection_id']:x}] ", style="cyan")
        key = _cut(record["key"], max_field_bytes)
        text.append(f"'{key}'" if record.get("key_encoding") != "hex" else f"hex:{key}", style="bold")
    xattrs = record.get("xattrs", [])
    for pair in xattrs[:XATTRS_SHOWN]:
        text = line().append("xattr ", style="dim").append(_cut(pair["key"], max_field_bytes), style="cyan")
        text.append(" ").append(_cut(pair["value"], max_field_bytes))
    if len(xattrs) > XATTRS_SHOWN:
        line().append(f"… {len(xattrs) - XATTRS_SHOWN} more xattrs", style="dim")
    if record.get("value"):
        value = record["value"]
        label = "value" + (" (hex)" if record.get("value_encoding") == "hex" else "")
        if "value_compressed" in record:
            label += f" (snappy {len(record['value_compressed']) // 2} bytes)"
        line().append(f"{label} ", style="dim").append(_cut(value, max_field_bytes))
    for diag in record["diagnostics"]:
        style = SEVERITY_STYLE.get(diag["severity"], "")
        where = f" @{diag['offset']}" if "offset" in diag else ""
        line().append(f"{diag['severity']} {diag['name']}{where}: ", style=style).append(shown(diag["message"]))
    return Group(*lines)
