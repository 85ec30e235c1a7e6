"""The names of a field's value, from the tables decode's JSON takes them from, for every renderer.

Decode's JSON names a magic, an opcode, a status and each HELLO feature (``walk.NAMED_LIST_FIELDS``); the
registry row's vocabularies name its extras codes and flags (stream end status, vbucket state, snapshot
flags...), and the datatype's bits have kv_engine names. Pretty output and the hexdump ask here, so a value
has one name wherever it is shown.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from dcpctl.protocol.constants import DATATYPES, MAGICS, STATUSES, flag_names
from dcpctl.protocol.walk import NAMED_FIELDS, list_item_name

if TYPE_CHECKING:
    from dcpctl.protocol.message import Message

NO_FLAGS: Final = "none"  # a flag field with no bit set
RAW_DATATYPE: Final = "RAW"  # kv_engine's PROTOCOL_BINARY_RAW_BYTES: datatype 0
_ITEM: Final = re.compile(r"^(?:.*\.)?([A-Za-z_]\w*)\.\d+$")  # a list item's span path: ``features.3``


def value_names(msg: Message, field: str, value: object) -> tuple[str, ...]:
    """The names of ``value`` in ``field`` of ``msg`` (a JSON field name, or a value span's path such as
    ``features.3``): one for a code, one per set bit of a flag field (``none`` when no bit is), () when the
    field's values have no names."""
    if type(value) is not int:
        return ()
    if field == "magic":
        return (MAGICS.name_of.get(value) or MAGICS.name(value),)
    if field == "opcode":
        return (msg.opcode_name,)
    if field == "status":
        return (STATUSES.name(value, 4),)
    if field == "datatype":
        return tuple(flag_names(DATATYPES, value)) or (RAW_DATATYPE,)
    variant = msg.variant
    if field == "request_type":
        return (variant.label,) if variant is not None and variant.label else ()
    item = _ITEM.match(field)
    if item is not None:
        name = list_item_name(item.group(1), value)
        return (name,) if name is not None else ()
    named = NAMED_FIELDS.get(field.rsplit(".", 1)[-1])  # a status inside a value: lookup_results.2.status
    if named is not None:
        return (named.name(value, 4),)
    vocab = variant.vocabularies.get(field) if variant is not None else None
    if vocab is None:
        return ()
    if field.endswith("flags"):  # flags, snapshot_flags, oso_flags...: a bit set, a name per bit
        return tuple(flag_names(vocab, value)) or (NO_FLAGS,)
    return (vocab.name(value),)
