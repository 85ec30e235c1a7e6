"""-f templates: one line per message, ``str.format`` over its JSON record's field names (as kcat's ``-f``).

A field is written as the JSON record has it, a string without its quotes ('{key}' gives airline_10, '{vbucket}'
12, '{failover_log}' the JSON list); a format spec formats the value itself ('{cas:x}', '{by_seqno:>8}'). A
field whose text holds a line break or a control character is escaped as pretty output escapes it, so each
message stays one line and no key or value can move the cursor or forge a line.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
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


def _known_field(name: str) -> tuple[str, tuple[int | str, ...]]:
    """A placeholder must name a field dcpctl emits: a misspelling would print nothing on every line."""
    first, indexes = _field(name)
    if first not in _FIELD_ROOTS:
        raise ValueError(f"{{{name}}}: unknown field {first!r}{did_you_mean(first, _FIELD_ROOTS)}")
    return first, tuple(indexes)


def _one_line(text: str) -> str:
    return text if text.isprintable() else shown(text)


# A template compiled once: each part a literal, then maybe a field (its name and indexes), its conversion
# and its format spec (text, or parts of its own: '{vbucket:>{width}}')
_Part = tuple[str, tuple[str, tuple[int | str, ...]] | None, str | None, "str | list[_Part]"]
_CONVERSIONS: Final[dict[str | None, Callable[[object], str] | None]] = {None: None, "r": repr, "s": str,
                                                                        "a": ascii}
# str.format's own limit: a format spec may hold fields, whose specs may not
_SPEC_DEPTH: Final = 1
# The widest field and the longest precision a spec may ask for: '{key:>99999999999}' would ask for memory the
# machine lacks, and a field as wide as a terminal's line needs far less than this.
MAX_WIDTH: Final = 10_000
# The standard format spec, for its width and precision: [[fill]align][sign][z][#][0][width][,_][.precision][type]
_SPEC: Final = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d*))?[a-zA-Z%]?", re.S)


def _bounded(spec: str, name: str) -> str:
    """The spec, when its width and precision are within :data:`MAX_WIDTH` (a spec that is not standard is
    left for format() to refuse)."""
    found = _SPEC.fullmatch(spec)
    if found is not None:
        for what in ("width", "precision"):
            number = found.group(what)
            if number and (len(number) > 6 or int(number) > MAX_WIDTH):
                raise ValueError(f"{{{name}:{spec}}}: a {what} of at most {MAX_WIDTH:,}")
    return spec


def _compiled(template: str, depth: int = _SPEC_DEPTH) -> list[_Part]:
    if depth < 0:
        raise ValueError("a field in a format spec cannot have fields in its own spec")
    parts: list[_Part] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            parts.append((literal, None, None, ""))
            continue
        field = _known_field(name)
        if conversion not in _CONVERSIONS:
            raise ValueError(f"{{{name}!{conversion}}}: the conversions are !r, !s and !a")
        text_spec = spec or ""
        parts.append((literal, field, conversion,
                      _compiled(text_spec, depth - 1) if "{" in text_spec else _bounded(text_spec, name)))
    return parts


def _fields(parts: list[_Part]) -> frozenset[tuple[str, tuple[int | str, ...]]]:
    """Every field the parts name, with its indexes, those of format specs included."""
    found: set[tuple[str, tuple[int | str, ...]]] = set()
    for _, field, _, spec in parts:
        if field is not None:
            found.add(field)
        if not isinstance(spec, str):
            found |= _fields(spec)
    return frozenset(found)


def _reaches(value: Any, indexes: tuple[int | str, ...]) -> bool:
    """Whether the indexes lead somewhere in the value: '{value[0]}' of an empty value, '{vbucket[0]}' of a
    number or '{failover_log[5]}' of a shorter log is a field the message does not have."""
    for index in indexes:
        try:
            value = value[index]
        except (IndexError, KeyError, TypeError):
            return False
    return True


def _render(parts: list[_Part], record: Mapping[str, Any]) -> str:
    out = []
    for literal, field, conversion, spec in parts:
        out.append(literal)
        if field is None:
            continue
        name, indexes = field
        value = record[name]
        for index in indexes:
            value = value[index]
        convert = _CONVERSIONS[conversion]
        if convert is not None:
            value = convert(value)
        text_spec = spec if isinstance(spec, str) else _bounded(_render(spec, record), name)
        if text_spec or isinstance(value, str):
            out.append(_one_line(format(value, text_spec)))
        else:  # numbers, lists, objects, true and null as JSON has them
            out.append(_one_line(orjson.dumps(value).decode()))
    return "".join(out)


class Template:
    """A checked template, compiled once. A message is written only when its record has every field the
    template names, and every index it takes into them: '{key} {by_seqno}' writes items, not a line of blanks
    for each snapshot marker, stream end and noop (as awk prints what matches), and '{value[0]}' skips the
    empty values; commands count and summarise only the messages that fit."""

    def __init__(self, text: str) -> None:
        """Refuses at once a template whose braces do not parse, that names an unknown field, names fields by
        position or reaches for attributes."""
        try:
            self._parts = _compiled(text)
        except ValueError as exc:
            raise TemplateError(str(exc)) from None
        fields = _fields(self._parts)
        self.needed = frozenset(name for name, _ in fields)
        self._indexed = tuple((name, indexes) for name, indexes in fields if indexes)

    def fits(self, record: Mapping[str, Any]) -> bool:
        """Whether the record has every field named, and every index into them leads somewhere."""
        return self.needed <= record.keys() and all(_reaches(record[name], indexes)
                                                    for name, indexes in self._indexed)

    def line(self, record: Mapping[str, Any]) -> str:
        """The record's line (no line break), for a record that :meth:`fits`."""
        try:
            return _render(self._parts, record)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            raise TemplateError(str(exc), record.get("opcode")) from None
