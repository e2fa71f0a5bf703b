"""How a figure reads for people, the same in every command and page: calls
counted from 1 (a fault's ``step`` is 0-based in the records), and a fraction
as its numerator over its denominator with the percentage after it."""

from __future__ import annotations

from typing import Any


def call_number(step: int) -> str:
    """A 0-based call index as people count it: ``call #1`` for step 0."""
    return f"call #{step + 1}"


def fault_text(kind: Any, step: Any) -> str:
    """An injected fault: ``http_503 at call #1`` (its kind alone without a step)."""
    kind = str(kind or "error")
    return f"{kind} at {call_number(step)}" if isinstance(step, int) and not isinstance(step, bool) else kind


def fraction(num: int, den: int) -> str:
    """``17/43 (39.5%)``; ``0/0 (n/a)`` without a denominator."""
    return f"{num}/{den} ({'n/a' if not den else f'{100 * num / den:.1f}%'})"


def fault_key_text(key: str | None) -> str:
    """A stored fault key (``0:http_503``, the step from 0) as people read it: ``http_503 at call #1``;
    a simulated user's profile (``|user:impatient``) as ``impatient user``; anything else as it is,
    and nothing as ``—``."""
    key, _, profile = (key or "").partition("|user:")  # report.PROFILE_MARK (this module imports nothing)
    who = f"{profile} user" if profile else ""
    step, sep, kind = key.partition(":")
    if not sep or not step.isdigit():
        return " · ".join(x for x in (key, who) if x) or "—"
    return " · ".join(x for x in (fault_text(kind, int(step)), who) if x)


def count(n: int, one: str, many: str = "") -> str:
    """``1 failed trajectory``, ``2 failed trajectories`` (``many``: ``one`` + "s" unless given)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def trajectories(n: int, adjective: str = "failed") -> str:
    """``1 failed trajectory``, ``37 failed trajectories``."""
    return count(n, f"{adjective} trajectory".strip(), f"{adjective} trajectories".strip())
