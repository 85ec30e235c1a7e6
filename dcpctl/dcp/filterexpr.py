"""``--filter`` expressions over record fields, e.g. ``opcode == "DCP_MUTATION" and by_seqno > 100``.

Parsed with the standard library's ``ast`` (Python expression syntax) and evaluated by walking a
whitelist of node types: comparisons, ``and``/``or``/``not``, field names, literals, lists/tuples for
``in``, and ``field.sub`` for nested objects. Nothing is ever passed to ``eval``; any other syntax is
rejected with a one-line error. A missing field makes its comparison false.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

MAX_EXPRESSION_LENGTH: Final = 4096  # a filter is typed by a person; longer input is a mistake
_MISSING: Final = object()
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


class FilterError(ValueError):
    """The expression is not in the supported subset; the message says what and where."""


Predicate = Callable[[Mapping[str, Any]], bool]


def compile_filter(text: str) -> Predicate:
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise FilterError(f"filter longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FilterError(f"filter syntax error at column {exc.offset}: {exc.msg}") from None
    _check(tree.body)

    def predicate(record: Mapping[str, Any]) -> bool:
        return bool(_eval(tree.body, record))

    return predicate


def _check(node: ast.AST) -> None:
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.Name,
               ast.Load, ast.Constant, ast.List, ast.Tuple, ast.Attribute, ast.Call)
    for child in ast.walk(node):
        if not isinstance(child, allowed) and not isinstance(child, tuple(_COMPARE)):
            raise FilterError(f"{type(child).__name__} is not allowed in a filter "
                              f"(column {getattr(child, 'col_offset', 0) + 1})")
        if (isinstance(child, ast.Attribute) and child.attr.startswith("_")) or (
                isinstance(child, ast.Name) and child.id.startswith("_")):
            raise FilterError("field names do not start with an underscore")
        if isinstance(child, ast.Call) and not (isinstance(child.func, ast.Name)
                                                and child.func.id in ("matches", "exists")):
            raise FilterError("the only functions are matches(field, regex) and exists(field)")


def _field(node: ast.AST, record: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[node.id]
        return record.get(node.id, _MISSING)
    assert isinstance(node, ast.Attribute)
    base = _field(node.value, record)
    return base.get(node.attr, _MISSING) if isinstance(base, Mapping) else _MISSING


def _eval(node: ast.AST, record: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, record) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, record)
        if isinstance(node.op, ast.Not):
            return not value
        return -value if isinstance(value, int | float) else _MISSING
    if isinstance(node, ast.Compare):
        left = _eval(node.left, record)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, record)
            if left is _MISSING or right is _MISSING:
                return False
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:
                return False
            left = right
        return True
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, record) for e in node.elts]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [_eval(a, record) for a in node.args]
        if node.func.id == "exists":
            return len(args) == 1 and args[0] is not _MISSING
        if len(args) != 2 or not isinstance(args[0], str) or not isinstance(args[1], str):
            return False
        return re.search(args[1], args[0]) is not None
    if isinstance(node, ast.Name | ast.Attribute):
        return _field(node, record)
    raise FilterError(f"{type(node).__name__} is not allowed in a filter")
