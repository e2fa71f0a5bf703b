"""BFCL's single-turn verdict, by BFCL's own rules (Python categories).

A port of bfcl-eval's ``eval_checker/ast_eval/ast_checker.py`` (Apache-2.0,
ShishirPatil/gorilla) for the Python categories, rule for rule, so that a
result file gets BFCL's verdict without the package:

- strings are compared after ``standardize_string``: spaces and the
  characters ``,./-_*^`` removed, lowercased, ``'`` read as ``"`` (so
  ``"x^2"`` matches ``"x**2"`` and ``"4x+7"`` matches ``"4x + 7"``), inside
  lists and dicts too;
- an integer is accepted for a ``float`` parameter; in an array its elements
  are compared by value (``1 == 1.0``);
- a value of the possible answers' type where the schema wants another is a
  variable (``"b"`` for a number) and compared as it is;
- each argument must be one of its possible answers; ``""`` among them means it
  may be left out; a required parameter must be given; an argument the
  possible answers do not name is refused;
- ``simple``: exactly one call; ``multiple``: one call, the one of the possible
  answer; ``parallel``: as many calls as possible answers, matched in any order.

The irrelevance categories pass when the answer decodes to no call
(``bfcl_decode``). Each verdict carries BFCL's ``error_type`` and message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from app.core.suites.tolerance import bfcl_standardize
from app.importers.bfcl_decode import Decoded, Undecodable, decode_any, is_empty

PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED = ("array", "tuple")


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one answer: valid, or BFCL's error type and message."""

    valid: bool
    error_type: str = ""
    error: str = ""


PASS = Verdict(True)


standardize = bfcl_standardize  # BFCL's ``standardize_string``


def verdict(
    category: str, functions: list[dict[str, Any]], answer: Any, ground_truth: list[dict[str, Any]] | None
) -> tuple[Verdict, Decoded | None]:
    """BFCL's verdict on a single-turn answer (its raw text, or already a
    list of ``{name: {arg: value}}``), with the decoded calls (None when
    they could not be decoded)."""
    try:
        decoded = decode_any(answer)
    except Undecodable as exc:
        if "irrelevance" in category:
            return PASS, None
        if "relevance" in category:
            return Verdict(False, "relevance_error:decoder_failed", f"Failed to decode AST. {exc}"), None
        return Verdict(False, "ast_decoder:decoder_failed", f"Invalid syntax. Failed to decode AST. {exc}"), None
    if "irrelevance" in category:
        if is_empty(decoded) or not _call_format(decoded):
            return PASS, decoded
        return Verdict(
            False, "irrelevance_error:decoder_success", "Valid syntax. Successfully decode AST when it should not."
        ), decoded
    if "relevance" in category:
        ok = not (is_empty(decoded) or not _call_format(decoded))
        return (PASS if ok else Verdict(False, "relevance_error:decoder_failed", "No call decoded.")), decoded
    if not _call_format(decoded):
        return Verdict(
            False, "ast_decoder:decoder_wrong_output_format", "Did not output in the specified format."
        ), decoded
    return check(functions, decoded, ground_truth or [], category), decoded


def _call_format(decoded: Any) -> bool:
    """``is_function_calling_format_output``."""
    return isinstance(decoded, list) and all(
        isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item.values())), dict) for item in decoded
    )


def check(functions: list[dict[str, Any]], calls: Decoded, possible: list[dict[str, Any]], category: str) -> Verdict:
    """``ast_checker`` for Python."""
    if "parallel" in category:
        return _parallel(functions, calls, possible)
    if "multiple" in category:
        if len(calls) != len(possible):
            return Verdict(False, "multiple_function_checker:wrong_count", "Wrong number of functions.")
        name = next(iter(possible[0]))
        return simple(_find(functions, name), calls[0], possible[0])
    if len(calls) != 1:
        return Verdict(False, "simple_function_checker:wrong_count", "Wrong number of functions.")
    return simple(functions[0], calls[0], possible[0])


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for f in functions:
        if f.get("name") == name:
            return f
    return {"name": name, "parameters": {"properties": {}, "required": []}}


def _parallel(functions: list[dict[str, Any]], calls: Decoded, possible: list[dict[str, Any]]) -> Verdict:
    if len(calls) != len(possible):
        return Verdict(False, "parallel_function_checker_no_order:wrong_count", "Wrong number of functions.")
    matched: set[int] = set()
    for i, answer in enumerate(possible):
        description = _find(functions, next(iter(answer)))
        found = False
        last = PASS
        for index, call in enumerate(calls):
            if index in matched:
                continue
            last = simple(description, call, answer)
            if last.valid:
                matched.add(index)
                found = True
                break
        if not found:
            return Verdict(
                False,
                "parallel_function_checker_no_order:cannot_find_match",
                f"Could not find a matching function for index {i} of possible answers"
                + (f" ({last.error})" if last.error else "."),
            )
    return PASS


def simple(description: Mapping[str, Any], call: dict[str, dict[str, Any]], possible: dict[str, Any]) -> Verdict:
    """``simple_function_checker``: one call against one possible answer."""
    answers: dict[str, list[Any]] = next(iter(possible.values()))
    name = description.get("name")
    parameters = description.get("parameters") or {}
    details: dict[str, Any] = parameters.get("properties") or {}
    if name not in call:
        return Verdict(
            False, "simple_function_checker:wrong_func_name", f"Function name {name!r} not found in model output."
        )
    given = call[name]
    for param in parameters.get("required") or []:
        if param not in given:
            return Verdict(False, "simple_function_checker:missing_required", f"Missing required parameter: {param!r}.")
    for param, value in given.items():
        if param not in details or param not in answers:
            return Verdict(False, "simple_function_checker:unexpected_param", f"Unexpected parameter: {param!r}.")
        found = _parameter(param, value, details[param], answers[param])
        if found is not None:
            return found
    for param, options in answers.items():
        if param not in given and "" not in options:
            return Verdict(
                False,
                "simple_function_checker:missing_optional",
                f"Optional parameter {param!r} not provided and not marked as optional.",
            )
    return PASS


def _parameter(param: str, value: Any, detail: Mapping[str, Any], options: list[Any]) -> Verdict | None:
    kind = str(detail.get("type"))
    expected = PYTHON_TYPES.get(kind)
    if expected is None:
        return Verdict(False, "type_error:unknown", f"Unknown type {kind!r} for parameter {param!r}.")
    nested = None
    if kind in NESTED:
        items = detail.get("items") or {}
        nested = PYTHON_TYPES.get(str(items.get("type"))) if isinstance(items, Mapping) else None
        if nested is None:
            return Verdict(False, "type_error:unknown", f"Unknown item type for parameter {param!r}.")
    if kind == "tuple" and type(value) is tuple:
        value = list(value)
    if kind == "float" and type(value) is int:
        value = float(value)
    typed = _type_check(param, value, options, kind, expected, nested)
    if isinstance(typed, Verdict):
        return typed
    if not typed:  # not a variable
        if expected is dict:
            return _dict(param, value, options)
        if expected is list and nested is dict:
            return _list_of_dicts(param, value, options)
        if expected is str:
            if standardize(value) not in [standardize(o) for o in options if type(o) is str]:
                return Verdict(
                    False,
                    "value_error:string",
                    f"Invalid value for parameter {param!r}: {value!r}. Expected one of {options}. Case insensitive.",
                )
            return None
        if expected is list:
            got = [standardize(v) if type(v) is str else v for v in value]
            # BFCL iterates over every option: "" (may be omitted) becomes the empty list
            wanted = [
                [standardize(v) if type(v) is str else v for v in o] for o in options if isinstance(o, (list, str))
            ]
            if got not in wanted:
                return Verdict(
                    False,
                    "value_error:list/tuple",
                    f"Invalid value for parameter {param!r}: {value!r}. Expected one of {options}.",
                )
            return None
    if value not in options:
        return Verdict(
            False, "value_error:others", f"Invalid value for parameter {param!r}: {value!r}. Expected one of {options}."
        )
    return None


def _answer_type(options: list[Any]) -> type | None:
    for option in options:
        if option != "":
            return type(option)
    return None


def _type_check(
    param: str, value: Any, options: list[Any], kind: str, expected: type, nested: type | None
) -> Verdict | bool:
    """``type_checker``: a failing verdict, or whether the value is a variable."""
    answer_type = _answer_type(options)
    variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return variable
        for option in options:
            if type(option) is list and not all(
                not isinstance(_type_check(param, item, option, str(nested), nested, None), Verdict)
                for item in cast(list[Any], value)
            ):
                continue
            return variable
        # BFCL's nested failure stands, even when the value is of the possible answers' type
        return Verdict(
            False,
            "type_error:nested",
            f"Nested type checking failed for parameter {param!r}. Expected outer type {kind} with "
            f"inner type {nested}. Parameter value: {value!r}.",
        )
    if answer_type is not None and type(value) is answer_type:
        return True
    return Verdict(
        False,
        "type_error:simple",
        f"Incorrect type for parameter {param!r}. Expected type {kind}, got {type(value).__name__}. "
        f"Parameter value: {value!r}.",
    )


def _dict(param: str, value: dict[str, Any], options: list[Any]) -> Verdict | None:
    """``dict_checker``."""
    failed = Verdict(False, "dict_checker:unclear", f"Invalid value for parameter {param!r}.")
    for option in options:
        if option == "":
            continue
        if not isinstance(option, Mapping):
            failed = Verdict(False, "dict_checker:unclear", f"Invalid value for parameter {param!r}.")
            continue
        failed_here = None
        for key, item in value.items():
            if key not in option:
                failed_here = Verdict(False, "value_error:dict_key", f"Unexpected dict key parameter: '{key}'.")
                break
            got = standardize(item) if type(item) is str else item
            wanted = [standardize(o) if type(o) is str else o for o in option[key]]
            if got not in wanted:
                failed_here = Verdict(
                    False,
                    "value_error:dict_value",
                    f"Invalid value for parameter {key!r}: {item!r}. Expected one of {wanted}.",
                )
                break
        if failed_here is None:
            for key, wanted in option.items():
                if key not in value and "" not in wanted:
                    failed_here = Verdict(False, "value_error:dict_key", f"Missing dict key parameter: '{key}'.")
                    break
        if failed_here is None:
            return None
        failed = failed_here
    return failed


def _list_of_dicts(param: str, value: list[Any], options: list[Any]) -> Verdict | None:
    """``list_dict_checker``."""
    failed = Verdict(False, "list_dict_checker:unclear", f"Invalid value for parameter {param!r}.")
    for option in options:
        if not isinstance(option, (list, str)) or len(value) != len(option):
            failed = Verdict(False, "value_error:list_dict_count", "Wrong number of dictionaries in the list.")
            continue
        for item, wanted in zip(value, option, strict=True):
            found = (
                _dict(param, item, [wanted])
                if isinstance(item, dict)
                else Verdict(False, "value_error:list_dict", f"Not a dict in {param!r}.")
            )
            if found is not None:
                failed = found
                break
        else:
            return None
    return failed
