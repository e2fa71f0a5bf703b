"""Word-level diff of two texts (tool descriptions), as plain segments."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Segment:
    op: str  # "equal", "delete" (only in a), "insert" (only in b)
    text: str


def word_diff(a: str, b: str) -> list[Segment]:
    """The segments that turn ``a`` into ``b``, word by word."""
    ta, tb = _TOKENS.findall(a or ""), _TOKENS.findall(b or "")
    out: list[Segment] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=ta, b=tb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(Segment("equal", "".join(ta[i1:i2])))
            continue
        if i2 > i1:
            out.append(Segment("delete", "".join(ta[i1:i2])))
        if j2 > j1:
            out.append(Segment("insert", "".join(tb[j1:j2])))
    return out
