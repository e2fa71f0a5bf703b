"""Keys a client supplies (a conversation id, a session header), compared whole.

A key is kept as it is when it is a short string; otherwise it is made short
and unique: a long string keeps its start and ends with a hash of the whole
value (``#sha256:`` and 32 hex digits), an integer ends with ``#int`` (so
that ``77`` and ``"77"`` stay two keys). A string that already looks like
one of those forms is hashed too: two different values never share a key
(short of a SHA-256 collision)."""

from __future__ import annotations

import hashlib
import re

_MARKED = re.compile(r"#(?:int|sha256:[0-9a-f]{32})\Z")
_HASH = len("#sha256:") + 32


def whole_key(value: str | int, limit: int) -> str:
    """``value`` as a key of at most ``limit`` characters (``limit`` > 40) that no other value shares."""
    if isinstance(value, int) and not isinstance(value, bool):
        text, kind = str(value), "int"
        if len(text) + 4 <= limit:
            return f"{text}#int"
    else:
        text, kind = str(value), "str"
        if len(text) <= limit and not _MARKED.search(text):
            return text
    digest = hashlib.sha256(f"{kind}:{text}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{text[: limit - _HASH]}#sha256:{digest}"
