"""A quick check that a tool schema is valid JSON Schema (draft 2020-12), for the common case.

Loading the ``jsonschema`` library costs more than scoring a small file. Tool schemas mostly use
a few keywords with plain values (``type: string``, ``required: [id]``, ``minLength: 3``); for
those this check says "valid" in microseconds. It is one-sided: anything it does not vouch for
(another keyword, another draft, an unusual value) goes to ``jsonschema``'s own meta-schema check,
which alone decides what is invalid and says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_LOCAL_REF = re.compile(r"#(/[A-Za-z0-9_.~$-]*)*")  # a valid URI reference under any checker
_MAX_DEPTH = 64


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def _regex(v: Any) -> bool:
    if type(v) is not str:
        return False
    try:
        re.compile(v)
    except re.error:
        return False
    return True


def _type(v: Any) -> bool:
    names = [v] if type(v) is str else v
    return type(names) is list and len(names) > 0 and _strings(names) and all(n in _TYPES for n in names)


def _strings(v: Any) -> bool:
    """A list of distinct strings."""
    return type(v) is list and all(type(n) is str for n in v) and len(set(v)) == len(v)


# keyword -> test of its value; a keyword that holds schemas is handled in ``plainly_valid``
_VALUES: dict[str, Callable[[Any], bool]] = {
    "type": _type,
    "enum": lambda v: type(v) is list,
    "const": lambda v: True,
    "required": _strings,
    "pattern": _regex,
    "format": lambda v: type(v) is str,
    "minLength": _count,
    "maxLength": _count,
    "minItems": _count,
    "maxItems": _count,
    "minProperties": _count,
    "maxProperties": _count,
    "minimum": _number,
    "maximum": _number,
    "exclusiveMinimum": _number,
    "exclusiveMaximum": _number,
    "multipleOf": lambda v: _number(v) and v > 0,
    "uniqueItems": lambda v: type(v) is bool,
    "$ref": lambda v: type(v) is str and _LOCAL_REF.fullmatch(v) is not None,
    "title": lambda v: type(v) is str,
    "description": lambda v: type(v) is str,
    "$comment": lambda v: type(v) is str,
    "default": lambda v: True,
    "examples": lambda v: type(v) is list,
    "readOnly": lambda v: type(v) is bool,
    "writeOnly": lambda v: type(v) is bool,
    "deprecated": lambda v: type(v) is bool,
    # not JSON Schema keywords: any value is valid
    "example": lambda v: True,
    "nullable": lambda v: True,
    "optional": lambda v: True,
    "discriminator": lambda v: True,
}
_ONE = frozenset({"items", "additionalProperties"})
_MANY = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_NAMED = frozenset({"properties", "$defs", "definitions"})


def plainly_valid(schema: Any, depth: int = 0) -> bool:
    """True when ``schema`` is certainly valid; False means "ask jsonschema", not "invalid"."""
    if type(schema) is bool:
        return True
    if type(schema) is not dict or depth > _MAX_DEPTH:
        return False
    for key, value in schema.items():
        if key in _ONE:
            ok = plainly_valid(value, depth + 1)
        elif key in _MANY:
            ok = type(value) is list and len(value) > 0 and all(plainly_valid(s, depth + 1) for s in value)
        elif key in _NAMED:
            ok = type(value) is dict and all(type(k) is str and plainly_valid(s, depth + 1) for k, s in value.items())
        else:
            test = _VALUES.get(key)
            ok = test is not None and test(value)
        if not ok:
            return False
    return True
