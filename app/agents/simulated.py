"""A simulated agent, for demos and tests. It is labelled as simulated
wherever it appears: its figures say nothing about any model.

It reads the case's expected calls and makes each failure kind at a
configurable rate, seeded so that runs repeat. Where it can, it reads the
toolset as the course says a model does (``app.agents.reading``): it calls
another tool instead of the right one when that tool's name and description
match the question about as well (negative delimitation telling the two
apart), gets an argument's type wrong half as often when the description
states its format, and swaps two steps half as often when the second's
description says to call the first before. Rewriting descriptions with the
four patterns (toolset v2 of the examples) therefore really lowers its
errors, as the course says it should for a real model.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.agents.reading import confusion_chance, read_toolset, states_precondition
from app.core.advise.lint import lint_toolset
from app.core.bounded import BoundedCache
from app.core.language import Language, detect_language, language_scores
from app.core.records import TRANSIENT_KINDS
from app.core.run.conversation import fold, says_value
from app.core.run.router import Toolbox
from app.core.suites.suite import Case, ExpectedCall
from app.core.suites.tolerance import parse_date
from app.core.suites.tools import Toolset

LABEL = "simulated"

# What the agent says, in the suite's language.
TEXTS: dict[Language, dict[str, str]] = {
    "es": {
        "no_tools": "No hace falta consultar herramientas para responder esto.",
        "give_up": "Lo siento, no pude obtener esa información en este momento; intenta más tarde.",
        "invent": "Listo: el resultado es {value}.",
        "nothing": "Revisé tu consulta, pero no encontré información para responder.",
        "found": "Esto es lo que encontré: {facts}.",
        "declined": "Entendido: no uso {tool}.",
        "ask": "Para ayudarte necesito tu {values} (para {tool}). ¿Me lo indicas?",
        "confirm": "Voy a usar {tool}, que no se puede deshacer. ¿Confirmas que proceda?",
    },
    "en": {
        "no_tools": "I do not need any tool to answer this.",
        "give_up": "Sorry, I could not get that information right now; please try again later.",
        "invent": "Done: the result is {value}.",
        "nothing": "I checked your request but found no information to answer it.",
        "found": "Here is what I found: {facts}.",
        "declined": "Understood: I will not use {tool}.",
        "ask": "To help you I need your {values} (for {tool}). Could you tell me?",
        "confirm": "I am going to use {tool}, which is irreversible. Do you confirm that I should proceed?",
    },
}
STATED_ORDER = 0.5  # an order error's chance where the second step's description says to call the first before
_INVENTED = ("cancelar_pedido", "consultar_cuenta", "obtener_cliente", "get_balance", "lookup_order")


@dataclass(frozen=True)
class SimRates:
    """How often the simulated agent makes each failure kind (0..1)."""

    confusion: float = 0.6  # scaled by how close the other tools read to the question (app.agents.reading)
    hallucinated_tool: float = 0.03
    schema_error: float = 0.06  # one argument of the wrong type
    wrong_value: float = 0.05  # one argument with a plausible wrong value
    order: float = 0.05  # two adjacent steps swapped
    skip: float = 0.03  # a step left out
    # after an error observation
    retry: float = 0.6  # try again (same arguments after a fault; corrected after its own mistake)
    give_up: float = 0.2  # say honestly it could not
    invent: float = 0.1  # state a figure it never saw (hallucination after error)

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"rate {name} must be between 0 and 1, got {value}")

    @classmethod
    def parse(cls, spec: str) -> SimRates:
        """``confusion=0.5,schema_error=0.1`` (names as the fields)."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, _, raw = part.partition("=")
            if key not in cls.__dataclass_fields__:
                raise ValueError(f"unknown rate {key!r} (known: {', '.join(cls.__dataclass_fields__)})")
            try:
                values[key] = float(raw)
            except ValueError:
                raise ValueError(f"rate {key!r} needs a number, got {raw!r}") from None
        return cls(**values)


def described_formats(toolset: Toolset) -> frozenset[tuple[str, str]]:
    """(tool, argument) pairs whose format or type the description states
    (no ``argument_format`` lint finding): the agent gets their type wrong
    half as often."""
    key = tuple((t.name, t.description, json.dumps(t.parameters, sort_keys=True, default=str)) for t in toolset.tools)
    found = _DESCRIBED.get(key)
    if found is None:
        unstated = {(f.tool, f.field) for f in lint_toolset(toolset) if f.rule == "argument_format"}
        found = frozenset(
            (t.name, str(name))
            for t in toolset.tools
            for name in (t.parameters.get("properties") or {})
            if (t.name, str(name)) not in unstated
        )
        _DESCRIBED.put(key, found)
    return found


_DESCRIBED: BoundedCache[tuple[tuple[str, str, str], ...], frozenset[tuple[str, str]]] = BoundedCache(64)


@dataclass
class SimulatedAgent:
    """A factory of seeded per-case agents; see the module docstring."""

    toolset: Toolset
    rates: SimRates = field(default_factory=SimRates)
    seed: int = 0
    label: str = LABEL

    def for_case(self, case: Case, trial: int, variant: str = "") -> CaseAgent:
        rng = random.Random(f"{self.seed}:{case.id}:{trial}:{variant}")
        if case.multi_turn:
            return ConversingAgent(self, case, rng)
        return CaseAgent(self, case, rng)


@dataclass
class CaseAgent:
    parent: SimulatedAgent
    case: Case
    rng: random.Random
    seen: list[str] = field(default_factory=list)  # successful observations, in order
    heard: list[str] = field(default_factory=list)  # the user's messages, in order

    def chance(self, rate: float) -> bool:
        return self.rng.random() < rate

    def says(self, key: str, **values: Any) -> str:
        """One of the agent's sentences (``TEXTS``), in the case's language:
        its question's, or the descriptions' when the question has no cue."""
        cues = language_scores([self.case.question])
        if cues["es"] == cues["en"]:
            lang = detect_language([self.case.question, *(t.description for t in self.parent.toolset.tools)])
        else:
            lang = "es" if cues["es"] > cues["en"] else "en"
        return TEXTS[lang][key].format(**values)

    def __call__(self, question: str, toolbox: Toolbox) -> str:
        self.heard.append(question)
        steps = self.shuffled(self.case.expected_calls or [])
        if not steps:
            return self.says("no_tools")
        return self.do_steps(steps, toolbox) or self.answer()

    def shuffled(self, expected: list[ExpectedCall]) -> list[ExpectedCall]:
        """The steps as this agent will take them: two adjacent ones swapped at the ``order`` rate."""
        steps = list(expected)
        if len(steps) > 1 and self.chance(self.parent.rates.order):
            i = self.rng.randrange(len(steps) - 1)
            stated = states_precondition(self.parent.toolset, steps[i + 1].name, steps[i].name)
            if not stated or self.chance(STATED_ORDER):
                steps[i], steps[i + 1] = steps[i + 1], steps[i]
        return steps

    def do_steps(self, steps: list[ExpectedCall], toolbox: Toolbox) -> str | None:
        for step in steps:
            if self.chance(self.parent.rates.skip):
                continue
            answer = self.do_step(step, toolbox)
            if answer is not None:
                return answer
        return None

    # -- one expected step ---------------------------------------------------

    def do_step(self, step: ExpectedCall, toolbox: Toolbox) -> str | None:
        """Call the step's tool (or a look-alike); react to errors. A string
        is a final answer given early (gave up, or invented a figure)."""
        rates = self.parent.rates
        name = self.pick_tool(step.name, toolbox)
        arguments, own_mistake = self.arguments_for(step, name, toolbox)
        for _attempt in range(3):
            observation = toolbox.call(name, arguments)
            if not toolbox.last_failed:
                self.seen.append(observation)
                return None
            if own_mistake and self.chance(rates.retry):
                name, arguments, own_mistake = step.name, _canonical(step), False  # corrected retry
                continue
            fault_kind = _fault_kind(observation)
            roll = self.rng.random()
            if roll < rates.give_up:
                return self.says("give_up")
            if roll < rates.give_up + rates.invent:
                return self.says("invent", value=self.rng.randrange(100_000, 999_999))
            if fault_kind in TRANSIENT_KINDS and self.chance(rates.retry):
                continue  # the same call again
            if self.chance(rates.retry):
                name, arguments = self.pick_other(step.name, toolbox), _canonical(step)
                continue  # a different tool
            return None  # carry on without it
        return None

    def pick_tool(self, expected: str, toolbox: Toolbox) -> str:
        rates = self.parent.rates
        if self.chance(rates.hallucinated_tool):
            invented = [n for n in _INVENTED if n not in toolbox.names]
            if invented:
                return self.rng.choice(invented)
        rivals = self.rivals(expected, exclude=True)
        if rivals and self.chance(confusion_chance(rivals, rates.confusion)):
            names = sorted(rivals)
            return self.rng.choices(names, weights=[rivals[n] for n in names])[0]
        return expected

    def rivals(self, expected: str, *, exclude: bool) -> dict[str, float]:
        """The tools that could be called instead of ``expected``, given what
        the user said so far, each with its weight against the expected
        tool's 1; with ``exclude``, not the case's other expected tools
        (calling one early is an order matter)."""
        skip = frozenset(c.name for c in self.case.expected_calls or []) if exclude else frozenset()
        return read_toolset(self.parent.toolset).rivals(" ".join(self.heard), expected, skip)

    def pick_other(self, expected: str, toolbox: Toolbox) -> str:
        """After an error, the tool that reads closest to the question."""
        rivals = self.rivals(expected, exclude=False)
        if not rivals:
            return expected
        return max(rivals, key=lambda n: (rivals[n], n))

    def arguments_for(self, step: ExpectedCall, name: str, toolbox: Toolbox) -> tuple[dict[str, Any], bool]:
        """The expected arguments, adapted to a confused tool's schema, with
        a type or value mistake at the configured rates."""
        rates = self.parent.rates
        args = _canonical(step) if name == step.name else _fit(step.arguments, self.parent.toolset, name)
        if not args:
            return args, name != step.name
        key = self.rng.choice(sorted(args))
        stated = (name, key) in described_formats(self.parent.toolset)
        if self.chance(rates.schema_error / 2 if stated else rates.schema_error):
            args[key] = _wrong_type(args[key])
            return args, True
        if self.chance(rates.wrong_value):
            args[key] = _wrong_value(args[key], self.rng)
            return args, True
        return args, name != step.name

    # -- the final answer ------------------------------------------------------

    def answer(self) -> str:
        """What the observations said, as plain facts (so the datum is grounded)."""
        facts: list[str] = []
        for observation in self.seen:
            facts.extend(_facts(observation))
        if not facts:
            return self.says("nothing")
        return self.says("found", facts="; ".join(dict.fromkeys(facts[:24])))


def _fault_kind(observation: str) -> str:
    text = observation.lower()
    if "timeout" in text:
        return "timeout"
    for code, kind in (("429", "http_429"), ("503", "http_503"), ("500", "http_500"), ("404", "not_found")):
        if code in text[:12]:
            return kind
    return "error"


def _facts(observation: str) -> list[str]:
    try:
        value = json.loads(observation)
    except ValueError:
        return []
    out: list[str] = []

    def walk(v: Any, key: str) -> None:
        if isinstance(v, Mapping):
            for k, item in v.items():
                walk(item, str(k))
        elif isinstance(v, list):
            for item in v[:5]:
                walk(item, key)
        elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
            out.append(f"{key} {v}" if key else str(v))

    walk(value, "")
    return out


def _canonical(step: ExpectedCall) -> dict[str, Any]:
    """The expected arguments as a careful agent writes them: a date given in
    words ("12 de marzo de 2024") in ISO form, a set of choices as its first."""
    args = dict(step.arguments)
    for key, rule in step.tolerance.items():
        if key not in args:
            continue
        if rule.kind == "date":
            parsed = parse_date(args[key])
            if parsed is not None:
                args[key] = parsed.isoformat()
        elif rule.kind == "one_of" and isinstance(args[key], list) and args[key]:
            args[key] = args[key][0]
    return args


def _fit(arguments: Mapping[str, Any], toolset: Toolset, name: str) -> dict[str, Any]:
    """Arguments for a look-alike tool: same-named fields kept, required ones
    filled from the values at hand or by type."""
    tool = toolset.get(name)
    if tool is None:
        return dict(arguments)
    schema = tool.parameters if isinstance(tool.parameters, Mapping) else {}
    props: Mapping[str, Any] = schema.get("properties") or {}
    values = list(arguments.values())
    out: dict[str, Any] = {}
    for field_name in schema.get("required") or list(props)[:1]:
        if field_name in arguments:
            out[field_name] = arguments[field_name]
            continue
        kind = (props.get(field_name) or {}).get("type")
        same = [v for v in values if _json_type(v) == kind]
        if not same and kind == "string":
            same = [str(v) for v in values if isinstance(v, (int, float, str))]
        out[field_name] = same[0] if same else _default(kind)
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _default(kind: Any) -> Any:
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(kind, "")


def _wrong_type(value: Any) -> Any:
    """The classic mistakes: an id as text ("8812"), an amount as "15.000"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.0f}".replace(",", ".")
    if isinstance(value, str):
        digits = re.sub(r"\D", "", value)
        return int(digits) if digits else 0
    return str(value)


def _wrong_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + rng.choice((-1, 1)) * max(1, abs(value) // 10)
    if isinstance(value, str) and value:
        last = value[-1]
        swap = "0" if last != "0" else "1"
        return value[:-1] + swap
    if isinstance(value, list) and value:
        return value[:-1]
    return value


# The simulated agent in a conversation (a multi-turn case): it asks the user for what the next
# step needs and nobody has said yet, and for a confirmation before an irreversible tool, then
# carries on with the case's expected steps, making the same failures at the same rates as in one turn.
@dataclass
class ConversingAgent(CaseAgent):
    plan: list[ExpectedCall] | None = None  # a simulated user's conversation: the steps still to do
    asked: set[str] = field(default_factory=set)  # what it asked the user for (argument names, "confirm:<tool>")

    def __call__(self, message: str, toolbox: Toolbox) -> str:
        """One turn: a scripted turn's steps, then a question for what the next
        turn needs (a value the user has not given, or a confirmation before an
        irreversible tool); with a simulated user, the case's steps until one
        needs such an answer."""
        self.heard.append(message)
        turns = self.case.turns
        if turns is not None:
            k = len(self.heard) - 1
            steps = self.shuffled(turns[k].expected_calls or []) if k < len(turns) else []
            answer = self.do_steps(steps, toolbox)
            if answer is not None:
                return answer
            upcoming = (turns[k + 1].expected_calls or []) if k + 1 < len(turns) else []
            question = self.question_for(upcoming[0], confirm=True) if upcoming else None
            return question or self.answer()
        if self.plan is None:
            self.plan = self.shuffled(self.case.expected_calls or [])
        while self.plan:
            step = self.plan[0]
            confirmed = self.confirmed(message)
            if not confirmed and f"confirm:{step.name}" in self.asked and self.irreversible(step.name):
                self.plan.pop(0)  # asked, and not confirmed: not done
                return self.says("declined", tool=step.name)
            question = self.question_for(step, confirm=not confirmed)
            if question is not None:
                return question
            self.plan.pop(0)
            if self.chance(self.parent.rates.skip):
                continue
            answer = self.do_step(step, toolbox)
            if answer is not None:
                self.plan = []
                return answer
        return self.answer()

    def question_for(self, step: ExpectedCall, *, confirm: bool) -> str | None:
        """What to ask the user before this step (each thing once), or None."""
        missing = [key for key in self.user_values(step) if key not in self.asked]
        if missing:
            self.asked.update(missing)
            return self.says("ask", values=", ".join(missing), tool=step.name)
        if confirm and self.irreversible(step.name) and f"confirm:{step.name}" not in self.asked:
            self.asked.add(f"confirm:{step.name}")
            return self.says("confirm", tool=step.name)
        return None

    def user_values(self, step: ExpectedCall) -> list[str]:
        """The step's text arguments (compared exactly) that nothing said or seen so far holds."""
        known = " ".join([*self.heard, *self.seen])
        return [
            key
            for key, value in step.arguments.items()
            if isinstance(value, str)
            and (step.tolerance.get(key) is None or step.tolerance[key].kind == "exact")
            and not says_value(value, known)
        ]

    def irreversible(self, name: str) -> bool:
        tool = self.parent.toolset.get(name)
        return tool is not None and (tool.destructive or "irreversible" in fold(tool.description))

    def confirmed(self, message: str) -> bool:
        words = fold(message)
        return "confirm" in words or words.startswith(("si", "yes"))
