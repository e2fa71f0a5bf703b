"""Mocked execution: fixed, deterministic responses and stateful effects.

A suite declares a tool's ``mock`` as a fixed response, or as responses keyed
by argument values with an optional default and an effect on the
per-trajectory state. Python users may give a responder callable instead,
which receives the validated arguments and the state and may change it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.errors import SuiteError
from app.core.suites.tolerance import values_equal


class ToolFailure(Exception):
    """Raised by a responder to make the call fail with an error observation
    (a business error of the tool, not an injected fault)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class Responder(Protocol):
    def __call__(self, arguments: dict[str, Any], state: dict[str, Any], /) -> Any: ...


@dataclass(frozen=True)
class Keyed:
    when: dict[str, Any]
    response: Any


@dataclass(frozen=True)
class MockSpec:
    """Declarative mock: ``response`` or ``responses`` (+ ``default``) and ``effect``."""

    response: Any = None
    responses: tuple[Keyed, ...] = ()
    default: Any = None
    has_response: bool = False
    has_default: bool = False
    effect: dict[str, Any] = field(default_factory=dict)

    def respond(self, arguments: dict[str, Any], state: dict[str, Any]) -> Any:
        """The response for these arguments; applies the effect on success."""
        chosen: Any
        for keyed in self.responses:
            if all(k in arguments and values_equal(arguments[k], v) for k, v in keyed.when.items()):
                chosen = keyed.response
                break
        else:
            if self.has_response:
                chosen = self.response
            elif self.has_default:
                chosen = self.default
            else:
                raise ToolFailure("not_found", "ERROR 404: not found")
        apply_effect(self.effect, arguments, state)
        return chosen


MOCK_KEYS = {"response", "responses", "default", "effect"}


def parse_mock(raw: Any, *, where: str = "") -> MockSpec:
    """Read a suite's ``mock`` value. A mapping whose keys are all among
    response/responses/default/effect (with one of the first two) is the
    structured form; anything else is a fixed response."""
    if not (isinstance(raw, Mapping) and raw and set(raw) <= MOCK_KEYS and ({"response", "responses"} & set(raw))):
        return MockSpec(response=raw, has_response=True)
    keyed: list[Keyed] = []
    for i, item in enumerate(raw.get("responses") or []):
        if not isinstance(item, Mapping) or "response" not in item:
            raise SuiteError("each keyed response needs 'when' and 'response'", field=f"{where} mock.responses[{i}]")
        when = item.get("when", item.get("arguments", {}))
        if not isinstance(when, Mapping):
            raise SuiteError("'when' must map argument names to values", field=f"{where} mock.responses[{i}].when")
        keyed.append(Keyed(when=dict(when), response=item["response"]))
    effect = raw.get("effect") or {}
    if not isinstance(effect, Mapping) or not set(effect) <= {"append", "set", "increment"}:
        raise SuiteError("effect takes 'append', 'set' or 'increment'", field=f"{where} mock.effect")
    return MockSpec(
        response=raw.get("response"),
        has_response="response" in raw,
        responses=tuple(keyed),
        default=raw.get("default"),
        has_default="default" in raw,
        effect=dict(effect),
    )


def apply_effect(effect: Mapping[str, Any], arguments: dict[str, Any], state: dict[str, Any]) -> None:
    """``append: KEY`` appends the arguments to ``state[KEY]``; ``set: {K: V}``
    sets keys; ``increment: KEY`` counts calls."""
    if not effect:
        return
    if "append" in effect:
        state.setdefault(str(effect["append"]), []).append(dict(arguments))
    if "set" in effect and isinstance(effect["set"], Mapping):
        state.update(effect["set"])
    if "increment" in effect:
        key = str(effect["increment"])
        state[key] = int(state.get(key, 0)) + 1


def render_observation(value: Any) -> str:
    """What the agent reads: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
