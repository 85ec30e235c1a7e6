"""``--filter`` expressions over record fields, e.g. ``opcode == "DCP_MUTATION" and by_seqno > 100``.

Parsed with the standard library's ``ast`` (Python expression syntax) and evaluated by walking a
whitelist of node types: comparisons, ``and``/``or``/``not``, field names, literals, lists/tuples for
``in``, and ``field.sub`` for nested objects, also inside a string field holding a JSON object (a document's
``value``, as ``value.name``). Nothing is ever passed to ``eval``; any other syntax is rejected with a
one-line error. A missing field makes its comparison false.
"""

from __future__ import annotations

import ast
import operator
import re
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

import orjson

from dcpctl.protocol.nearest import did_you_mean

MAX_EXPRESSION_LENGTH: Final = 4096  # a filter is typed by a person; longer input is a mistake
# Levels of nesting (each operator, call, list or field.sub is one): a filter a person types nests a few;
# the evaluator recurses once a level, so a deeper one (1,000 `not`s) would exhaust Python's stack.
MAX_NESTING: Final = 64
_FUNCTIONS: Final = {"matches": 2, "exists": 1}  # the functions a filter may call, and their arity
_MISSING: Final = object()
_LITERALS: Final = {"true": True, "false": False, "null": None}  # JSON's words, which are not fields
_COMPARE: Final[dict[type[ast.cmpop], Callable[[Any, Any], bool]]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED: Final = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.Name, ast.Load,
                   ast.Constant, ast.List, ast.Tuple, ast.Attribute, ast.Call, *_COMPARE)


class FilterError(ValueError):
    """The expression is not in the supported subset; the message says what and where."""


Predicate = Callable[[Mapping[str, Any]], bool]


def compile_filter(text: str, fields: Collection[str] | None = None) -> Predicate:
    """A predicate over JSON records, or FilterError (and nothing else) for any text that is not a filter.
    The predicate returns a bool for any record and raises nothing. With ``fields``, a name that is not one
    of them (a misspelling, which would silently match nothing) is a FilterError naming the closest."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise FilterError(f"filter longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" in a regex's quotes is the regex's escape
            warnings.simplefilter("ignore")
            tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise FilterError(f"filter syntax error{where}: {exc.msg!s}") from None
    except ValueError as exc:  # a NUL character, on some Python versions
        raise FilterError(f"filter syntax error: {exc!s}") from None
    except (RecursionError, MemoryError):  # the parser's own limits on nesting (4096 characters cannot fill memory)
        raise FilterError(f"filter nested more than {MAX_NESTING} levels deep") from None
    patterns = _check(tree.body, fields)

    def predicate(record: Mapping[str, Any]) -> bool:
        return bool(_eval(tree.body, record, patterns, {}))

    return predicate


def _check(root: ast.AST, fields: Collection[str] | None) -> dict[ast.Call, re.Pattern[str]]:
    """Refuse what is not in the subset, or a field not in ``fields`` (without recursing: the tree may be
    deep); returns the regexes of the matches() calls, compiled once."""
    patterns: dict[ast.Call, re.Pattern[str]] = {}
    pending = [(root, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_NESTING:
            raise FilterError(f"filter nested more than {MAX_NESTING} levels deep")
        if not isinstance(node, _ALLOWED):
            raise FilterError(f"{type(node).__name__} is not allowed in a filter "
                              f"(column {getattr(node, 'col_offset', 0) + 1})")
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")) or (
                isinstance(node, ast.Name) and node.id.startswith("_")):
            raise FilterError("field names do not start with an underscore")
        if fields is not None and isinstance(node, ast.Name) and node.id not in _LITERALS and node.id not in fields:
            raise FilterError(f"unknown field {node.id!r} (column {node.col_offset + 1})"
                              f"{did_you_mean(node.id, fields)}")
        if isinstance(node, ast.Attribute) and not isinstance(node.value, ast.Name | ast.Attribute):
            raise FilterError(f"field.sub needs a field name before the dot (column {node.col_offset + 1})")
        if isinstance(node, ast.Call):
            patterns.update(_checked_call(node))
            children: list[ast.AST] = list(node.args)  # the function's name is not a field
        else:
            children = list(ast.iter_child_nodes(node))
        pending.extend((child, depth + 1) for child in children)
    return patterns


def _checked_call(node: ast.Call) -> dict[ast.Call, re.Pattern[str]]:
    """matches(value, "regex") or exists(field), with the regex compiled; anything else is refused."""
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name not in _FUNCTIONS:
        raise FilterError("the only functions are matches(field, regex) and exists(field)")
    if node.keywords or len(node.args) != _FUNCTIONS[name]:
        raise FilterError(f"{name}() takes {_FUNCTIONS[name]} argument{'s' if _FUNCTIONS[name] > 1 else ''} "
                          f"(column {node.col_offset + 1}): matches(field, regex) or exists(field)")
    if name == "exists":
        if not isinstance(node.args[0], ast.Name | ast.Attribute):
            raise FilterError(f"exists() takes a field name (column {node.col_offset + 1})")
        return {}
    regex = node.args[1]
    if not (isinstance(regex, ast.Constant) and isinstance(regex.value, str)):
        raise FilterError(f"matches() takes its regex as a quoted string (column {node.col_offset + 1})")
    try:
        with warnings.catch_warnings():  # re's FutureWarnings ("possible nested set") are not the user's error
            warnings.simplefilter("ignore")
            return {node: re.compile(regex.value)}
    except re.error as exc:
        raise FilterError(f"matches(): bad regex at position {exc.pos}: {exc.msg}") from None
    except (OverflowError, RecursionError) as exc:  # a repeat count past re's, groups nested past Python's stack
        raise FilterError(f"matches(): regex too big or too deep ({exc!s})") from None


# A record's parsed JSON documents, by the id of the string holding each: one record's evaluation parses a
# value once however many comparisons reach into it (the record holds the strings, so the ids stay theirs)
_Documents = dict[int, Any]


def _document(text: str, documents: _Documents) -> Any:
    """The JSON object a string holds (a document's value, JSON by its datatype or not), else _MISSING:
    text that is not a JSON object has no fields, as a number has none."""
    found = documents.get(id(text))
    if found is None:
        found = _MISSING
        if text.lstrip()[:1] == "{":  # a key, hex or plain text is not parsed at all
            try:
                parsed = orjson.loads(text)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                found = parsed
        documents[id(text)] = found
    return found


def _field(node: ast.AST, record: Mapping[str, Any], documents: _Documents) -> Any:
    if isinstance(node, ast.Name):
        if node.id in _LITERALS:
            return _LITERALS[node.id]
        return record.get(node.id, _MISSING)
    assert isinstance(node, ast.Attribute)
    base = _field(node.value, record, documents)
    if isinstance(base, str):
        base = _document(base, documents)
    return base.get(node.attr, _MISSING) if isinstance(base, Mapping) else _MISSING


def _eval(node: ast.AST, record: Mapping[str, Any], patterns: dict[ast.Call, re.Pattern[str]],
          documents: _Documents) -> Any:
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, record, patterns, documents) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, record, patterns, documents)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(value, int | float) else _MISSING
    if isinstance(node, ast.Compare):
        left = _eval(node.left, record, patterns, documents)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, record, patterns, documents)
            if left is _MISSING or right is _MISSING:
                return False
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except (TypeError, RecursionError):  # a type mismatch, or two values nested deeper than the stack
                return False
            left = right
        return True
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, record, patterns, documents) for e in node.elts]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        value = _eval(node.args[0], record, patterns, documents)
        if node.func.id == "exists":
            return value is not _MISSING
        return isinstance(value, str) and patterns[node].search(value) is not None
    if isinstance(node, ast.Name | ast.Attribute):
        return _field(node, record, documents)
    raise FilterError(f"{type(node).__name__} is not allowed in a filter")
