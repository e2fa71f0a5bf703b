"""BFCL ground truths that break their own tool's schema, written into the suite as marked
exceptions (``schema_exceptions`` of an expected call: argument -> what breaks and why BFCL
itself accepts it), so that ``lint`` and ``score`` take the suite as it is, and the person
reading it sees the exception and its reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def bfcl_reason(message: str, *, multi_turn: bool = False) -> str:
    """Why BFCL itself accepts a ground-truth value that breaks the schema, from the kind of break."""
    if multi_turn:
        return (
            "BFCL runs multi-turn calls on its own Python classes and compares state and results: the "
            "schema's types are not checked"
        )
    if "required by the schema" in message:
        return (
            'BFCL\'s checker still refuses a call without a required argument: the "" (may be omitted) '
            "among its possible answers is never reached"
        )
    if "is not one of" in message:
        return "BFCL's checker compares the value with the possible answers only: the schema's enum is not checked"
    if "expected a date" in message or "format" in message:
        return "BFCL's checker compares the value with the possible answers only: the schema's format is not checked"
    if "expected" in message and "got" in message:
        return (
            "BFCL's checker takes a possible answer of another type than the schema's as written (a variable's "
            "name, or the type it expects instead) and compares the value with it"
        )
    return "BFCL's checker compares the value with the possible answers only, not with the schema"


def mark_exceptions(call: dict[str, Any], breaks: Mapping[str, str], *, multi_turn: bool = False) -> None:
    """Write each break into the expected call as a marked exception, with BFCL's reason."""
    if breaks:
        call["schema_exceptions"] = {
            arg: f"{message}; {bfcl_reason(message, multi_turn=multi_turn)}" for arg, message in breaks.items()
        }
