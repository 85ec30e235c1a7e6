"""-f templates: one line per message, ``str.format`` over its JSON record's field names (as kcat's ``-f``).

A field is written as the JSON record has it, a string without its quotes ('{key}' gives airline_10, '{vbucket}'
12, '{failover_log}' the JSON list); a format spec formats the value itself ('{cas:x}', '{by_seqno:>8}'). A
field whose text holds a line break or a control character is escaped as pretty output escapes it, so each
message stays one line and no key or value can move the cursor or forge a line.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any, Final

import orjson

from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.fields import field_roots
from dcpctl.protocol.nearest import did_you_mean
from dcpctl.safetext import shown

# A template's field: a record field's name, then indexes into it ({key[0]}, {failover_log[0][seqno]}). Never
# an attribute: str.format's {x.__class__...} walks from any value to the process's globals and environment
# (a password); indexes go into the record's JSON values only, none of them named with a leading _.
_FIELD: Final = re.compile(r"([^.\[\]]+)((?:\[[^\]]+\])*)")
_INDEX: Final = re.compile(r"\[([^\]]+)\]")
_FIELD_ROOTS: Final = field_roots()


class TemplateError(CommandError):
    """A template that cannot be used: refused at once, or when a message's value does not fit its spec."""

    def __init__(self, reason: str, opcode: str | None = None) -> None:
        where = f" for {opcode}" if opcode is not None else ""
        super().__init__(f"-f: bad template{where}: {reason}", ExitCode.USAGE)


def _field(name: str) -> tuple[str, list[int | str]]:
    found = _FIELD.fullmatch(name)
    indexes: list[int | str] = [int(i) if i.isdigit() else i for i in _INDEX.findall(found.group(2))] if found else []
    if found is None or found.group(1)[0].isdigit() or any(str(i).startswith("_") for i in indexes):
        raise ValueError(f"{{{name}}}: name a field, and index it if need be, as in {{by_seqno}} or {{key[0]}}")
    return found.group(1), indexes


def _known_field(name: str) -> str:
    """A placeholder must name a field dcpctl emits: a misspelling would print nothing on every line."""
    first, _ = _field(name)
    if first not in _FIELD_ROOTS:
        raise ValueError(f"{{{name}}}: unknown field {first!r}{did_you_mean(first, _FIELD_ROOTS)}")
    return first


def _one_line(text: str) -> str:
    return text if text.isprintable() else shown(text)


class _Formatter(string.Formatter):
    """str.format over a record, indexed but never through attributes (see _FIELD)."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        first, indexes = _field(field_name)
        value = kwargs[first]
        for index in indexes:
            value = value[index]
        return value, first

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec or isinstance(value, str):
            return _one_line(format(value, format_spec))
        return _one_line(orjson.dumps(value).decode())  # numbers, lists, objects, true and null as JSON has them

    def names(self, template: str) -> frozenset[str]:
        """The fields ``template`` names (in its format specs too)."""
        found: set[str] = set()
        for _, name, spec, conversion in self.parse(template):
            if name is not None:
                found.add(_known_field(name))
            if conversion not in (None, "r", "s", "a"):
                raise ValueError(f"{{{name}!{conversion}}}: the conversions are !r, !s and !a")
            if spec:
                found |= self.names(spec)
        return frozenset(found)


class Template:
    """A checked template. A message is written only when its record has every field the template names:
    '{key} {by_seqno}' writes items, not a line of blanks for each snapshot marker, stream end and noop (as awk
    prints what matches); commands count and summarise only the messages that fit."""

    def __init__(self, text: str) -> None:
        """Refuses at once a template whose braces do not parse, that names an unknown field, names fields by
        position or reaches for attributes."""
        self.text = text
        self._formatter = _Formatter()
        try:
            self.needed = self._formatter.names(text)
        except ValueError as exc:
            raise TemplateError(str(exc)) from None

    def fits(self, record: Mapping[str, Any]) -> bool:
        return self.needed <= record.keys()

    def line(self, record: Mapping[str, Any]) -> str:
        """The record's line (no line break), for a record that :meth:`fits`."""
        try:
            return self._formatter.vformat(self.text, (), record)
        except (ValueError, IndexError, AttributeError, KeyError, TypeError) as exc:
            raise TemplateError(str(exc), record.get("opcode")) from None
