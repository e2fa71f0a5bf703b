"""A BFCL model answer read the way BFCL reads it, with ``ast`` only.

BFCL decodes a prompting model's text (``"[func(a=1), other(b='x')]"``) with
``default_decode_ast_prompting`` (bfcl-eval's ``model_handler/utils.py``):
strip backticks, newlines and spaces, wrap in ``[...]`` when missing, parse as
a Python expression, and read each call's keyword arguments. This module does
the same, value by value (``resolve_ast_by_type``), and keeps BFCL's quirks,
since its verdicts depend on them: positional arguments are dropped, a bare
name is read as its text (``b=b`` is ``"b"``), a call without keywords as its
source text, a unary operator on a constant negates it. Where BFCL evaluates
text (an arithmetic expression, ``2*3``), the expression is computed here on
literal numbers and strings only, with bounds; anything else fails to decode,
as it does in BFCL (a name in it is not defined there). Nothing is executed.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

MAX_TEXT = 100_000  # characters of one answer
MAX_CALLS = 1_000  # calls in one answer
MAX_RESULT = 10_000  # characters (or digits) of a computed value

Decoded = list[dict[str, dict[str, Any]]]
"""BFCL's decoded form: ``[{func_name: {arg: value}}]``."""


class Undecodable(ValueError):
    """BFCL cannot decode this text into calls (it then counts as no call)."""


def decode(text: str) -> Decoded:
    """The calls of a prompting model's answer, as BFCL decodes them; raises
    ``Undecodable`` where BFCL's decoder raises."""
    if not isinstance(text, str):
        raise Undecodable("not a text")
    if len(text) > MAX_TEXT:
        raise Undecodable(f"longer than {MAX_TEXT} characters")
    result = text.strip("`\n ")
    if not result.startswith("["):
        result = "[" + result
    if not result.endswith("]"):
        result = result + "]"
    cleaned = result.strip().strip("'")
    try:
        body = ast.parse(cleaned, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise Undecodable(f"not a Python expression ({type(exc).__name__})") from None
    try:
        if isinstance(body, ast.Call):
            return [_call(body)]
        elements = getattr(body, "elts", None)
        if elements is None:
            raise Undecodable("not a list of calls")
        if len(elements) > MAX_CALLS:
            raise Undecodable(f"more than {MAX_CALLS} calls")
        calls = []
        for element in elements:
            if not isinstance(element, ast.Call):
                raise Undecodable("an element that is not a call")
            calls.append(_call(element))
        return calls
    except RecursionError:
        raise Undecodable("nested too deeply") from None


def is_empty(decoded: Decoded) -> bool:
    """BFCL's ``is_empty_output``: no call, or one call of no name and no arguments."""
    return len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


def _call(node: ast.Call) -> dict[str, dict[str, Any]]:
    parts: list[str] = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise Undecodable("a **mapping argument")
        arguments[keyword.arg] = _value(keyword.value)
    return {".".join(reversed(parts)): arguments}


def _value(node: ast.expr) -> Any:
    """``resolve_ast_by_type``: one argument's value."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):  # BFCL negates the operand's value, whatever the operator
        operand = node.operand
        if not isinstance(operand, ast.Constant):
            raise Undecodable("a unary operator on something other than a constant")
        try:
            return -operand.value  # type: ignore[operator]
        except TypeError:
            raise Undecodable("a unary operator on a constant that is not a number") from None
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise Undecodable("a **mapping inside a dict")
            k = _value(key)
            try:
                out[k] = _value(value)
            except TypeError:
                raise Undecodable("a dict key that cannot be a key") from None
        return out
    if isinstance(node, ast.BinOp):
        return _arithmetic(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise Undecodable(f"unsupported value: {type(node).__name__}")


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}


def _arithmetic(node: ast.expr) -> Any:
    """What ``eval`` gives for an expression of literal numbers and strings
    (BFCL evaluates a ``BinOp`` argument), bounded; anything else is undecodable."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex, str)):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        try:
            return _UNARY[type(node.op)](_arithmetic(node.operand))
        except TypeError:
            raise Undecodable("an operator that does not apply") from None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 1_000:
            raise Undecodable("an exponent beyond 1000")
        if isinstance(node.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
            count = right if isinstance(left, str) else left
            if isinstance(count, int) and count * len(left if isinstance(left, str) else right) > MAX_RESULT:
                raise Undecodable(f"a text longer than {MAX_RESULT} characters")
        try:
            value = _BINARY[type(node.op)](left, right)
        except (TypeError, ZeroDivisionError, OverflowError, ValueError):
            raise Undecodable("an arithmetic expression that fails") from None
        if isinstance(value, int) and value.bit_length() > MAX_RESULT:
            raise Undecodable(f"a number of more than {MAX_RESULT} bits")
        return value
    raise Undecodable("an expression that is not plain arithmetic on literals")


def decode_any(answer: Any) -> Decoded:
    """A ``result`` (or one step of a multi-turn turn) in any shape BFCL writes:
    a prompting model's text, or a function-calling model's list of
    ``{func_name: arguments}`` (arguments an object or its JSON text)."""
    if isinstance(answer, str):
        return decode(answer)
    if not isinstance(answer, list):
        raise Undecodable(f"a {type(answer).__name__}, not a text or a list of calls")
    if len(answer) > MAX_CALLS:
        raise Undecodable(f"more than {MAX_CALLS} calls")
    calls: Decoded = []
    for item in answer:
        if not isinstance(item, dict) or len(item) != 1:
            raise Undecodable("a list element that is not {func_name: arguments}")
        ((name, arguments),) = item.items()
        if isinstance(arguments, str):
            if len(arguments) > MAX_TEXT:
                raise Undecodable(f"arguments longer than {MAX_TEXT} characters")
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                raise Undecodable("arguments that are not JSON") from None
        if not isinstance(arguments, dict):
            raise Undecodable("arguments that are not an object")
        calls.append({str(name): arguments})
    return calls
