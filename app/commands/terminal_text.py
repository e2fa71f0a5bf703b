"""Untrusted text for the terminal, importable without the report's dependencies."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(value: object) -> str:
    """Untrusted text for the terminal: control characters (escape sequences
    included) shown as \\xNN instead of acted on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", str(value))
