"""What changed between two JSON Schemas, as a list of paths (for the
toolset page: "the schema changed" is not enough to act on)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_CHANGES = 200
_MISSING = object()


@dataclass(frozen=True, slots=True)
class SchemaChange:
    path: str  # JSON-pointer-like: /properties/id/type
    op: str  # "added" | "removed" | "changed"
    a: str | None  # the old value as compact JSON
    b: str | None


def _show(value: Any) -> str | None:
    if value is _MISSING:
        return None
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 300 else text[:299] + "…"


def schema_changes(a: Any, b: Any, path: str = "") -> list[SchemaChange]:
    """Every leaf that differs, walking objects key by key (arrays compared whole)."""
    out: list[SchemaChange] = []
    _walk(a, b, path, out)
    return out[:MAX_CHANGES]


def _walk(a: Any, b: Any, path: str, out: list[SchemaChange]) -> None:
    if len(out) >= MAX_CHANGES or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), sub, out)
        return
    op = "added" if a is _MISSING else "removed" if b is _MISSING else "changed"
    out.append(SchemaChange(path=path or "/", op=op, a=_show(a), b=_show(b)))
