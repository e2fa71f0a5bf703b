"""BFCL's multi-turn verdict: both call lists executed on BFCL's own classes.

BFCL judges a multi-turn answer (bfcl-eval's ``multi_turn_checker``) by running
the model's calls and the ground truth's, turn by turn, on fresh instances of
its API classes (a file system, a trading bot, a travel agency…) loaded with
the question's ``initial_config``; after each turn whose ground truth is not
empty, the model must have made a call, the instances must be in the same
state (their public attributes equal), and every result of the ground truth's
calls of that turn must be among the results of the model's calls so far.

The classes come from the ``bfcl-eval`` package (``pip install --no-deps
bfcl-eval mpmath``, an optional extra). BFCL calls them through ``eval`` of the
call text; here a decoded call (``bfcl_decode``: ``ast`` only) is a method
looked up by name among the involved instances' public methods and called
with its keyword values: nothing is evaluated. A name that is no such method
gives an error result, as in BFCL (its ``eval`` finds no such name).
"""

from __future__ import annotations

import ast
import copy
import decimal
import functools
import importlib
import inspect
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.importers.bfcl_decode import Decoded, Undecodable, decode_any

# bfcl-eval's CLASS_FILE_PATH_MAPPING and STATELESS_CLASSES
_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS = frozenset({"MathAPI"})
REFUSED = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})  # BFCL refuses these
MAX_EXPONENT = 1_000  # MathAPI.power's exponent, square_root's and logarithm's precision: beyond, not run
MAX_DIGITS = 100  # nor with a number beyond 10**100 (power would not end)
UNBOUNDED = frozenset({"power", "square_root", "logarithm"})


def _too_big(name: str, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) > (MAX_EXPONENT if name in ("exponent", "precision") else 10**MAX_DIGITS)


INSTALL = "pip install --no-deps bfcl-eval mpmath"


def unavailable() -> str | None:
    """Why BFCL's classes cannot be used here, or None when they can."""
    try:
        importlib.import_module(f"{_PREFIX}.gorilla_file_system")
    except ImportError as exc:
        return f"bfcl-eval is not installed ({exc.name or exc}): `{INSTALL}` gives BFCL's verdict"
    return None


@dataclass
class Step:
    """One call the model made, as BFCL executed it."""

    turn: int  # 1-based
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass
class StateVerdict:
    """BFCL's verdict on one multi-turn answer, and where it failed."""

    valid: bool
    error_type: str = ""
    error: str = ""
    turn: int | None = None  # the turn that failed, from 1 (BFCL's own messages count from 0)
    steps: list[Step] = field(default_factory=list)


class Instances:
    """The involved classes' instances of one side (model or ground truth)."""

    def __init__(self, classes: list[str], config: Mapping[str, Any], long_context: bool = False):
        self.by_class: dict[str, Any] = {}
        self.owner: dict[str, Any] = {}  # public method name -> the instance that has it (the last class wins)
        for name in classes:
            cls = _class(name)
            instance = cls()
            if name not in STATELESS:
                instance._load_scenario(copy.deepcopy(dict(config.get(name) or {})), long_context=long_context)
            self.by_class[name] = instance
            for method_name in _methods(cls):
                self.owner[method_name] = instance

    def call(self, name: str, arguments: dict[str, Any], positional: list[Any] | None = None) -> str:
        """The call's result as BFCL records it (``execute_multi_turn_func_call``)."""
        base = name.split(".")[-1]
        if base in REFUSED:
            return f"Error during execution: Function call {base} is not allowed."
        owner = self.owner.get(name)
        method = getattr(owner, name, None) if owner is not None else None
        if method is None:
            return f"Error during execution: name {name.split('.')[0]!r} is not defined"
        if name in UNBOUNDED and any(_too_big(k, v) for k, v in arguments.items()):
            return (
                f"Error during execution: not run by ToolLens (an exponent or precision beyond {MAX_EXPONENT}, "
                f"or a number beyond 10**{MAX_DIGITS})"
            )
        mpmath = sys.modules.get("mpmath")
        dps = mpmath.mp.dps if mpmath is not None else None
        try:
            with decimal.localcontext():  # MathAPI sets the precision of Decimal and mpmath for everyone
                return _text(method(*(positional or ()), **arguments))  # as text while the precision holds
        except Exception as exc:  # any error of BFCL's classes is the call's result, as in BFCL
            return f"Error during execution: {exc}"
        finally:
            if mpmath is not None:
                mpmath.mp.dps = dps


def _text(result: Any) -> str:
    """A call's result as BFCL records it."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


@functools.cache
def _class(name: str) -> Any:
    module = CLASS_MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown BFCL class {name!r}")
    return getattr(importlib.import_module(f"{_PREFIX}.{module}"), name)


@functools.cache
def _methods(cls: Any) -> tuple[str, ...]:
    """A class's public methods (what BFCL's ``inspect.getmembers`` finds on an instance)."""
    return tuple(n for n, v in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_"))


def step_calls(text: Any) -> Decoded | None:
    """One step of a turn, decoded as BFCL's ``decode_execute``: None when it
    is no call (undecodable, or empty)."""
    try:
        decoded = decode_any(text)
    except Undecodable:
        return None
    for call in decoded:  # decoded_output_to_execution_list: a {} value cannot be rendered
        for value in next(iter(call.values())).values():
            if isinstance(value, dict) and not value:
                return None
    return decoded or None


def steps_of(turn: Any) -> list[Any]:
    """A turn of a result as its steps: a list of model outputs, or one text."""
    return list(turn) if isinstance(turn, list) else [turn]


def judge(question: Mapping[str, Any], turns: list[Any], truth: list[list[str]]) -> StateVerdict:
    """BFCL's verdict on the model's turns (each a list of steps, a step the
    model's text) against the ground truth's call strings per turn."""
    classes = [str(c) for c in question.get("involved_classes") or []]
    config = question.get("initial_config") or {}
    qid = str(question.get("id", ""))
    long_context = "long_context" in qid or "composite" in qid
    if len(turns) != len(truth):
        return StateVerdict(
            False,
            "multi_turn:force_terminated",
            f"The length of the model result turns ({len(turns)}) does not match the length of "
            f"the ground truth turns ({len(truth)}).",
        )
    model = Instances(classes, config, long_context)
    gold = Instances(classes, config, long_context)
    steps: list[Step] = []
    all_results: list[str] = []
    failed: StateVerdict | None = None  # BFCL stops here; the later turns still run, for their results
    for t, (turn, expected) in enumerate(zip(turns, truth, strict=True), start=1):
        decoded_steps = [d for d in (step_calls(s) for s in steps_of(turn)) if d is not None]
        for decoded in decoded_steps:
            for call in decoded:
                ((name, arguments),) = call.items()
                result = _nested_or_call(model, name, arguments)
                steps.append(Step(t, name, arguments, result))
                all_results.append(result)
        gold_results = [_gold_call(gold, text) for text in expected]
        if failed is None and expected:
            failed = _turn_check(t, decoded_steps, model, gold, all_results, gold_results)
    if failed is not None:
        failed.steps = steps
        return failed
    return StateVerdict(True, steps=steps)


def _turn_check(
    t: int,
    decoded_steps: list[Decoded],
    model: Instances,
    gold: Instances,
    all_results: list[str],
    gold_results: list[str],
) -> StateVerdict | None:
    """BFCL's checks after a turn whose ground truth is not empty: the failure, or None."""
    if not decoded_steps:
        return StateVerdict(
            False, "multi_turn:empty_turn_model_response", f"Model response list is empty for turn {t}", t
        )
    for cls, truth_instance in gold.by_class.items():
        differences = _differences(model.by_class[cls], truth_instance)
        if differences:
            return StateVerdict(
                False,
                "multi_turn:instance_state_mismatch",
                f"Model instance for {cls} does not match the state with ground truth instance "
                f"({', '.join(differences)} differ).",
                t,
            )
    remaining = list(all_results)
    missing = []
    for item in gold_results:
        try:
            remaining.remove(item)
        except ValueError:
            missing.append(item)
    if missing:
        return StateVerdict(
            False,
            "multi_turn:execution_response_mismatch",
            f"Model response execution results so far does not contain all the ground truth "
            f"response execution results for turn {t} (missing: {str(missing)[:300]}).",
            t,
        )
    return None


def _nested_or_call(instances: Instances, name: str, arguments: dict[str, Any]) -> str:
    """A call whose argument is itself a call (BFCL would run both) is not run here."""
    for value in arguments.values():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            return "Error during execution: a call inside an argument is not run by ToolLens"
    return instances.call(name, arguments)


def _gold_call(instances: Instances, text: str) -> str:
    """A ground-truth call string run on the ground truth's instances; its
    positional arguments kept (BFCL evaluates these strings as they are)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a function by name")
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        return f"Error during execution: {exc}"
    return instances.call(node.func.id, kwargs, args)


def _differences(model: Any, truth: Any) -> list[str]:
    """``_compare_instances``: the public attributes that differ."""
    return [
        name for name in vars(truth) if not name.startswith("_") and getattr(model, name, None) != getattr(truth, name)
    ]
