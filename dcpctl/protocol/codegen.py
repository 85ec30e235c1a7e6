"""Functions generated from declarations (per item shape, per record shape, per message's blank), compiled
once and named so that tracebacks say which."""

from __future__ import annotations

from typing import Any


def compiled(lines: list[str], name: str, namespace: dict[str, Any], function: str = "read") -> Any:
    """The ``function`` the source ``lines`` define, compiled under ``name`` (shown in tracebacks)."""
    exec(compile("\n".join(lines), f"<dcpctl {name}>", "exec"), namespace)  # noqa: S102
    return namespace[function]
