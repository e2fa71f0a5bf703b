"""Trajectory records (docs/formats.md): one JSON object per line of a ``.jsonl`` file.

Everything in a record is untrusted: it is parsed defensively, bounded in
size, and a record that does not follow the format raises InvalidTrajectory
naming the line and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from app.core.errors import InvalidTrajectory
from app.core.usage import ModelCall, milliseconds, parse_model_calls

MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_CALLS = 5_000
MAX_NAME = 256  # tool names, case ids, error kinds
MAX_DEPTH = 32  # nesting of a stored JSON value (arguments, state, a run's config), docs/security.md
REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")  # NUL (PostgreSQL text refuses it) and lone surrogates
# Where a line's bytes may give a string that clean_text changes: NUL or a surrogate written as an escape
# (\u0000, \ud800-\udfff), or a surrogate's UTF-8 bytes (json's fallback reads them). A line without one
# reads only clean strings (JSON has no other way to write them): parse_record(clean=True) skips the rule.
# Two searches: the escape's literal prefix lets the regular expression engine skip ahead at C speed (twice
# as quick as ``b"\\u" in raw``, where every "u" of the text is a candidate); the bytes, where an 0xED is.
_ESCAPE_TO_CLEAN = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")

FAULT_KINDS = ("timeout", "http_429", "http_503", "http_500", "not_found", "malformed")
TRANSIENT_KINDS = frozenset({"timeout", "http_429", "http_503"})


# The classes built once per call or per trajectory write their ``__init__``
# out (``init=False``): compiled with mypyc, that one is native, where the one
# ``dataclass`` generates stays interpreted and costs more than the rest of
# building the object.


@dataclass(slots=True, init=False)
class CallError:
    """An error observation: injected by the fault plan or produced by the tool."""

    kind: str
    message: str = ""
    injected: bool = False
    delay_ms: float | None = None  # an injected delay before the fault answered (an extension key)

    def __init__(self, kind: str, message: str = "", injected: bool = False, delay_ms: float | None = None) -> None:
        self.kind = kind
        self.message = message
        self.injected = injected
        self.delay_ms = delay_ms

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message, "injected": self.injected}
        if self.delay_ms is not None:
            out["delay_ms"] = self.delay_ms
        return out


@dataclass(slots=True, init=False)
class Call:
    """One executed call. ``arguments`` is a dict, or the raw text when the
    agent sent a JSON string that did not parse (a schema failure)."""

    name: str
    arguments: Any
    observation: str | None = None
    error: CallError | None = None
    raw_arguments: str | None = None  # the JSON string as sent, when it was one
    turn: int | None = None  # the user turn it answers (1-based), when the record says (an extension key)
    latency_ms: float | None = None  # the tool's wall time, an injected delay included (an extension key)
    batch: int | None = None  # the index of the first call of the model response that issued it, when that
    # response issued several (parallel tool calls; an extension key)

    def __init__(
        self,
        name: str,
        arguments: Any,
        observation: str | None = None,
        error: CallError | None = None,
        raw_arguments: str | None = None,
        turn: int | None = None,
        latency_ms: float | None = None,
        batch: int | None = None,
    ) -> None:
        self.name = name
        self.arguments = arguments
        self.observation = observation
        self.error = error
        self.raw_arguments = raw_arguments
        self.turn = turn
        self.latency_ms = latency_ms
        self.batch = batch

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "arguments": self.raw_arguments if self.raw_arguments is not None else self.arguments,
            "observation": self.observation,
            "error": None if self.error is None else self.error.to_dict(),
        }
        if self.turn is not None:
            out["turn"] = self.turn
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
        if self.batch is not None:
            out["batch"] = self.batch
        return out


@dataclass(slots=True, init=False)
class Message:
    """What the user or the agent said, and where in the call sequence: after
    ``calls_before`` calls. Lets the outcome judge what the agent said after a
    fault, and keeps a conversation's user turns (an extension key)."""

    role: str  # "user" or "assistant"
    content: str
    calls_before: int

    def __init__(self, role: str, content: str, calls_before: int) -> None:
        self.role = role
        self.content = content
        self.calls_before = calls_before

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, "calls_before": self.calls_before}


MESSAGE_ROLES = ("user", "assistant")
MAX_MESSAGES = 5_000
MAX_TURN = 1_000  # user turns told apart; later user messages count in the last one (bounds per-turn figures)
MAX_USER_ERRORS = 20
MAX_DETAIL = 2_000  # characters of a user_error's detail
USER_ERROR_KINDS = ("leaked_instruction", "stopped_early", "contradicted_known")


@dataclass(slots=True)
class UserError:
    """A fault of the simulated user, not of the agent (an extension key):
    ``kind`` is one of USER_ERROR_KINDS (other names are kept as given)."""

    kind: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail}


MAX_ERROR_TYPE = 200  # characters of an agent error's type (module.Name)
MAX_ERROR_MESSAGE = 2_000  # characters of its message
MAX_FRAMES = 8  # the last frames of its traceback kept
MAX_FRAME = 400  # characters of one frame


@dataclass(slots=True)
class AgentError:
    """What the agent raised, kept on its trajectory (an extension key): the exception's type, its message
    and the last frames of its traceback (innermost last), each bounded."""

    type: str
    message: str = ""
    traceback: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "traceback": list(self.traceback)}

    @classmethod
    def from_exception(cls, exc: BaseException) -> AgentError:
        """The exception as it is kept: cut to the bounds, never rejected."""
        import traceback

        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ in ("builtins", "__main__")
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        frames = list(traceback.extract_tb(exc.__traceback__))
        while len(frames) > 1 and frames[0].filename.startswith(_runner_frames()):  # the runner's, not the agent's
            frames = frames[1:]
        frames = frames[-MAX_FRAMES:]
        shown = [
            _cut(f"{f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else ""), MAX_FRAME)
            for f in frames
        ]
        return cls(
            _cut(clean_text(name), MAX_ERROR_TYPE),
            _cut(clean_text(str(exc)), MAX_ERROR_MESSAGE),
            [clean_text(s) for s in shown],
        )


def _runner_frames() -> tuple[str, ...]:
    """Where the frames that call an agent live (ToolLens's runner, asyncio's thread hand-off): left out
    of the start of an agent error's traceback."""
    import asyncio
    import concurrent.futures
    import os

    folders = [os.path.dirname(m.__file__ or "") + os.sep for m in (asyncio, concurrent.futures)]
    return (*folders, os.path.join(os.path.dirname(__file__), "run", "runner.py"))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class Fault:
    """What was injected in a trajectory: the call index and the kind."""

    step: int | None
    kind: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind}


@dataclass(slots=True, init=False)
class Trajectory:
    """One agent run on one case (trajectory record, docs/formats.md)."""

    case_id: str
    trial: int = 0
    question: str = ""
    calls: list[Call] = field(default_factory=list)
    answer: str = ""
    fault: Fault | None = None
    reward: float | None = None
    state: dict[str, Any] | None = None
    stopped: str | None = None  # why the agent loop ended early, e.g. "step_limit" (an extension key)
    messages: list[Message] | None = None  # the conversation around the calls (an extension key)
    user_error: list[UserError] | None = None  # the simulated user's faults (an extension key)
    model_calls: list[ModelCall] | None = None  # one entry per request to the model (an extension key)
    agent_error: AgentError | None = None  # what the agent raised, with stopped="agent_error" (an extension key)
    user_profile: str | None = None  # the simulated user's profile, e.g. "impatient" (an extension key)
    user_acts: list[UserError] | None = None  # what that profile did on purpose (an extension key)
    user_mirror_trial: int | None = None  # under a profile: the cooperative trial it mirrors (an extension key)

    def __init__(
        self,
        case_id: str,
        trial: int = 0,
        question: str = "",
        calls: list[Call] | None = None,
        answer: str = "",
        fault: Fault | None = None,
        reward: float | None = None,
        state: dict[str, Any] | None = None,
        stopped: str | None = None,
        messages: list[Message] | None = None,
        user_error: list[UserError] | None = None,
        model_calls: list[ModelCall] | None = None,
        agent_error: AgentError | None = None,
        user_profile: str | None = None,
        user_acts: list[UserError] | None = None,
        user_mirror_trial: int | None = None,
    ) -> None:
        self.case_id = case_id
        self.trial = trial
        self.question = question
        self.calls = [] if calls is None else calls
        self.answer = answer
        self.fault = fault
        self.reward = reward
        self.state = state
        self.stopped = stopped
        self.messages = messages
        self.user_error = user_error
        self.model_calls = model_calls
        self.agent_error = agent_error
        self.user_profile = user_profile
        self.user_acts = user_acts
        self.user_mirror_trial = user_mirror_trial

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "case_id": self.case_id,
            "trial": self.trial,
            "question": self.question,
            "calls": [c.to_dict() for c in self.calls],
            "answer": self.answer,
            "fault": None if self.fault is None else self.fault.to_dict(),
        }
        if self.reward is not None:
            out["reward"] = self.reward
        if self.state is not None:
            out["state"] = self.state
        if self.stopped is not None:
            out["stopped"] = self.stopped
        if self.messages is not None:
            out["messages"] = [m.to_dict() for m in self.messages]
        if self.user_error:
            out["user_error"] = [u.to_dict() for u in self.user_error]
        if self.model_calls is not None:
            out["model_calls"] = [m.to_dict() for m in self.model_calls]
        if self.agent_error is not None:
            out["agent_error"] = self.agent_error.to_dict()
        if self.user_profile is not None:
            out["user_profile"] = self.user_profile
        if self.user_acts:
            out["user_acts"] = [u.to_dict() for u in self.user_acts]
        if self.user_mirror_trial is not None:
            out["user_mirror_trial"] = self.user_mirror_trial
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_RUN = b"0" * 19  # 19 digits in a row: an integer orjson may turn into a float


def _has_long_integer(raw: bytes) -> bool:
    """Whether the text holds 19 digits in a row (C speed: translate + find)."""
    return _LONG_RUN in raw.translate(_DIGITS_AS_ZERO)


MAX_INDEX = 2**31 - 1  # trial numbers and fault steps


def loads(text: str | bytes) -> Any:
    """JSON as the standard library reads it, fast: orjson, except where it
    would differ (integers of 19 digits and more, which it turns into floats)
    or refuse (what it cannot take goes to ``json``). Raises ValueError for
    what is not JSON or too deep; lone surrogates read as U+FFFD (``clean_text``)."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _LONG_RUN not in raw.translate(_DIGITS_AS_ZERO):  # _has_long_integer, inline: once per line
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    try:
        data = json.loads(text)
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: stored as U+FFFD, the rule for every stored string
            data = _replace_surrogates(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return data


def clean_text(text: str) -> str:
    """The one rule for stored strings: NUL and lone surrogates read as U+FFFD,
    on SQLite and PostgreSQL alike (a Python str holds a surrogate only alone)."""
    if "\x00" in text or (not text.isascii() and _UNSTORABLE.search(text) is not None):
        return _UNSTORABLE.sub(REPLACEMENT, text)
    return text


def clean_value(value: Any, depth: int = 0, limit: int = MAX_DEPTH) -> Any:
    """A JSON value as it is stored: its strings (keys too) cleaned; ValueError
    when it is nested deeper than ``limit`` or holds NaN or an infinity."""
    kind = type(value)
    if kind is str:
        return clean_text(value)
    if kind is dict:
        if depth >= limit:
            raise ValueError(f"nested deeper than {limit} levels")
        return {clean_text(str(k)): clean_value(v, depth + 1, limit) for k, v in value.items()}
    if kind is list:
        if depth >= limit:
            raise ValueError(f"nested deeper than {limit} levels")
        return [clean_value(v, depth + 1, limit) for v in value]
    if kind is float and not math.isfinite(value):
        raise ValueError("holds a number that is not finite (NaN or an infinity)")
    return value


def check_value(value: Any, depth: int = 0, limit: int = MAX_DEPTH) -> Any:
    """``clean_value`` for a value whose strings need no cleaning: the same checks, in the same
    order (ValueError when nested deeper than ``limit`` or holding NaN or an infinity), and the
    value itself back, not a copy."""
    kind = type(value)
    if kind is dict or kind is list:
        if depth >= limit:
            raise ValueError(f"nested deeper than {limit} levels")
        for v in value.values() if kind is dict else value:
            t = type(v)
            if t is dict or t is list or t is float:
                check_value(v, depth + 1, limit)
    elif kind is float and not math.isfinite(value):
        raise ValueError("holds a number that is not finite (NaN or an infinity)")
    return value


def needs_no_cleaning(raw: bytes) -> bool:
    """Whether every string read from the JSON text ``raw`` is as ``clean_text`` leaves it (one
    C-speed search of the bytes; a false "no" only costs the cleaning)."""
    if _ESCAPE_TO_CLEAN.search(raw) is not None:
        return False
    return b"\xed" not in raw or _SURROGATE_BYTES.search(raw) is None


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


def parse_arguments(raw: Any) -> Any:
    """Arguments may arrive as a JSON string (as OpenAI sends them); a string
    that does not parse (an empty one included) is kept verbatim and fails the
    schema later."""
    if isinstance(raw, str):
        try:
            return loads(raw)
        except ValueError:
            return raw
    return {} if raw is None else raw


def _text(value: Any, name: str, index: int | None, source: str, *, optional: bool = True) -> str:
    if value is None and optional:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, int, float, bool)):
        return json.dumps(value, ensure_ascii=False)  # observations may arrive as JSON values
    raise InvalidTrajectory(f"expected a string, got {type(value).__name__}", index=index, field=name, source=source)


def _call_error(
    err: Any, i: int, bad: Callable[[str, str], InvalidTrajectory], index: int | None, source: str
) -> CallError:
    if isinstance(err, str):
        return CallError(kind="error", message=clean_text(err))
    if not isinstance(err, dict):
        raise bad("must be null or an object", f"calls[{i}].error")
    kind = err.get("kind", "error")
    if not isinstance(kind, str) or len(kind) > 40:
        raise bad("must be a string of at most 40 characters", f"calls[{i}].error.kind")
    message = _text(err.get("message"), f"calls[{i}].error.message", index, source)
    delay = milliseconds(err.get("delay_ms"), f"calls[{i}].error.delay_ms", bad)
    return CallError(clean_text(kind), clean_text(message), err.get("injected") is True, delay)


def parse_record(data: Any, *, index: int | None = None, source: str = "", clean: bool = False) -> Trajectory:
    """Build a Trajectory from a decoded JSON object, or raise InvalidTrajectory. ``clean``: its
    strings are known to need no cleaning (``needs_no_cleaning`` of the line it was read from)."""

    def bad(message: str, where: str = "") -> InvalidTrajectory:
        return InvalidTrajectory(message, index=index, field=where, source=source)

    if type(data) is not dict:
        raise bad(f"a record must be a JSON object, got {type(data).__name__}")
    case_id = data.get("case_id")
    if type(case_id) is not str:
        if type(case_id) is not int:
            raise bad("required, a non-empty string", "case_id")
        case_id = str(case_id)
    if not case_id:
        raise bad("required, a non-empty string", "case_id")
    if len(case_id) > MAX_NAME:
        raise bad(f"longer than {MAX_NAME} characters", "case_id")
    trial = data.get("trial", 0)
    if type(trial) is not int or not 0 <= trial <= MAX_INDEX:
        raise bad(f"must be an integer from 0 to {MAX_INDEX}", "trial")
    raw_calls = data.get("calls", [])
    if type(raw_calls) is not list:
        raise bad("must be a list", "calls")
    if len(raw_calls) > MAX_CALLS:
        raise bad(f"more than {MAX_CALLS} calls", "calls")
    calls: list[Call] = []
    append = calls.append
    for i, rc in enumerate(raw_calls):
        # the common shapes take the fast path; anything else is checked field by field
        if type(rc) is not dict:
            raise bad("each call must be an object", f"calls[{i}]")
        name = rc.get("name")
        if type(name) is not str or len(name) > MAX_NAME:
            raise bad(
                "required, a string" if type(name) is not str else f"longer than {MAX_NAME} characters",
                f"calls[{i}].name",
            )
        err = rc.get("error")
        error = None if err is None else _call_error(err, i, bad, index, source)
        obs = rc.get("observation")
        if obs is not None:
            if type(obs) is not str:
                obs = clean_text(_text(obs, f"calls[{i}].observation", index, source))
            elif not clean:
                obs = clean_text(obs)
        args = rc.get("arguments")
        raw: str | None = None
        if type(args) is str:
            raw = args if clean else clean_text(args)
            args = parse_arguments(raw)
        try:
            args = {} if args is None else check_value(args) if clean and type(args) is not str else clean_value(args)
        except ValueError as exc:
            raise bad(str(exc), f"calls[{i}].arguments") from None
        turn = rc.get("turn")
        if turn is not None and (type(turn) is not int or not 1 <= turn <= MAX_TURN):
            raise bad(f"must be an integer from 1 to {MAX_TURN}", f"calls[{i}].turn")
        latency = rc.get("latency_ms")
        if latency is not None:
            latency = milliseconds(latency, f"calls[{i}].latency_ms", bad)
        batch = rc.get("batch")
        if batch is not None and (type(batch) is not int or not 0 <= batch <= i):
            raise bad(
                f"must be an integer from 0 to the call's own index ({i}): the first call of its batch",
                f"calls[{i}].batch",
            )
        append(Call(name if clean else clean_text(name), args, obs, error, raw, turn, latency, batch))
    fault: Fault | None = None
    raw_fault = data.get("fault")
    if raw_fault is not None:
        if not isinstance(raw_fault, dict):
            raise bad("must be null or an object", "fault")
        step = raw_fault.get("step")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_INDEX):
            raise bad(f"must be an integer from 0 to {MAX_INDEX}", "fault.step")
        kind = raw_fault.get("kind", "error")
        if not isinstance(kind, str) or len(kind) > 40:
            raise bad("must be a string of at most 40 characters", "fault.kind")
        fault = Fault(step=step, kind=clean_text(kind))
    reward = data.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise bad("must be a number", "reward")
    if reward is not None and not (isinstance(reward, float) or -(10**300) < reward < 10**300):
        raise bad("out of range", "reward")
    if isinstance(reward, float) and not math.isfinite(reward):
        raise bad("must be a finite number (not NaN or an infinity)", "reward")
    state = data.get("state")
    if state is not None and not isinstance(state, dict):
        raise bad("must be an object", "state")
    if state is not None:
        try:
            state = check_value(state) if clean else clean_value(state)
        except ValueError as exc:
            raise bad(str(exc), "state") from None
    stopped = data.get("stopped")
    if stopped is not None and (type(stopped) is not str or len(stopped) > 40):
        raise bad("must be a string of at most 40 characters", "stopped")
    messages = None if data.get("messages") is None else _messages(data["messages"], len(calls), bad, clean)
    user_error = None if data.get("user_error") is None else _user_errors(data["user_error"], bad)
    model_calls = None if data.get("model_calls") is None else parse_model_calls(data["model_calls"], bad)
    agent_error = None if data.get("agent_error") is None else _agent_error(data["agent_error"], bad)
    profile = data.get("user_profile")
    if profile is not None and (type(profile) is not str or not profile or len(profile) > 40):
        raise bad("must be a string of at most 40 characters", "user_profile")
    user_acts = None if data.get("user_acts") is None else _user_errors(data["user_acts"], bad, "user_acts")
    mirror = data.get("user_mirror_trial")
    if mirror is not None and (type(mirror) is not int or not 0 <= mirror <= MAX_INDEX):
        raise bad(f"must be an integer from 0 to {MAX_INDEX}", "user_mirror_trial")
    question = data.get("question")
    answer = data.get("answer")
    if type(question) is not str:
        question = clean_text(_text(question, "question", index, source))
    elif not clean:
        question = clean_text(question)
    if type(answer) is not str:
        answer = clean_text(_text(answer, "answer", index, source))
    elif not clean:
        answer = clean_text(answer)
    return Trajectory(
        case_id if clean else clean_text(case_id),
        trial,
        question,
        calls,
        answer,
        fault,
        None if reward is None else float(reward),
        state,
        None if stopped is None else clean_text(stopped),
        messages,
        user_error or None,
        model_calls,
        agent_error,
        None if profile is None else clean_text(profile),
        user_acts or None,
        mirror,
    )


def _agent_error(raw: Any, bad: Callable[[str, str], InvalidTrajectory]) -> AgentError:
    """The ``agent_error`` extension key: ``{type, message, traceback}``, bounded."""
    if type(raw) is not dict:
        raise bad("must be an object {type, message, traceback}", "agent_error")
    kind, message, frames = raw.get("type"), raw.get("message", ""), raw.get("traceback", [])
    if type(kind) is not str or not kind or len(kind) > MAX_ERROR_TYPE:
        raise bad(f"required, a string of at most {MAX_ERROR_TYPE} characters", "agent_error.type")
    if type(message) is not str or len(message) > MAX_ERROR_MESSAGE:
        raise bad(f"must be a string of at most {MAX_ERROR_MESSAGE} characters", "agent_error.message")
    if type(frames) is not list or len(frames) > MAX_FRAMES:
        raise bad(f"must be a list of at most {MAX_FRAMES} frames", "agent_error.traceback")
    for i, f in enumerate(frames):
        if type(f) is not str or len(f) > MAX_FRAME:
            raise bad(f"must be a string of at most {MAX_FRAME} characters", f"agent_error.traceback[{i}]")
    return AgentError(clean_text(kind), clean_text(message), [clean_text(f) for f in frames])


def _user_errors(raw: Any, bad: Callable[[str, str], InvalidTrajectory], key: str = "user_error") -> list[UserError]:
    """The ``user_error`` (or ``user_acts``) extension key: ``[{kind, detail}]``, bounded."""
    if type(raw) is not list:
        raise bad("must be a list of {kind, detail}", key)
    if len(raw) > MAX_USER_ERRORS:
        raise bad(f"more than {MAX_USER_ERRORS} entries", key)
    out: list[UserError] = []
    for i, u in enumerate(raw):
        if type(u) is not dict:
            raise bad("each entry must be an object {kind, detail}", f"{key}[{i}]")
        kind = u.get("kind")
        if type(kind) is not str or not kind or len(kind) > 40:
            raise bad("required, a string of at most 40 characters", f"{key}[{i}].kind")
        detail = u.get("detail", "")
        if type(detail) is not str or len(detail) > MAX_DETAIL:
            raise bad(f"must be a string of at most {MAX_DETAIL} characters", f"{key}[{i}].detail")
        out.append(UserError(clean_text(kind), clean_text(detail)))
    return out


def call_turns(traj: Trajectory) -> list[int] | None:
    """The user turn of each call (1-based), or None when the record is not a
    conversation. Calls that carry ``turn`` keep it (a call without one takes
    the previous call's); otherwise, with two user messages or more, the turn
    of call i is 1 + the user messages after the first with ``calls_before`` <= i
    (at most MAX_TURN)."""
    calls = traj.calls
    if any(c.turn is not None for c in calls):
        out: list[int] = []
        last = 1
        for c in calls:
            last = c.turn if c.turn is not None else last
            out.append(last)
        return out
    starts = [m.calls_before for m in traj.messages or () if m.role == "user"][1:]
    if not starts:
        return None
    turns = []
    t = 0
    for i in range(len(calls)):
        while t < len(starts) and starts[t] <= i:
            t += 1
        turns.append(min(t + 1, MAX_TURN))
    return turns


def user_turns(traj: Trajectory) -> list[str]:
    """What the user said at the start of each turn, in order (the first is
    the question when the record keeps no user messages)."""
    said = [m.content for m in traj.messages or () if m.role == "user"][:MAX_TURN]
    return said or ([traj.question] if traj.question else [])


def _messages(
    raw: Any, n_calls: int, bad: Callable[[str, str], InvalidTrajectory], clean: bool = False
) -> list[Message]:
    """The ``messages`` extension key: ``[{role, content, calls_before}]`` in order."""
    if type(raw) is not list:
        raise bad("must be a list", "messages")
    if len(raw) > MAX_MESSAGES:
        raise bad(f"more than {MAX_MESSAGES} messages", "messages")
    out: list[Message] = []
    last = 0
    for i, m in enumerate(raw):
        if type(m) is not dict:
            raise bad("each message must be an object", f"messages[{i}]")
        role = m.get("role")
        if role not in MESSAGE_ROLES:
            raise bad(f"must be one of {', '.join(MESSAGE_ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if type(content) is not str:
            raise bad("required, a string", f"messages[{i}].content")
        at = m.get("calls_before", n_calls)
        if type(at) is not int or not last <= at <= n_calls:
            raise bad(f"must be an integer from {last} to {n_calls} (messages in order)", f"messages[{i}].calls_before")
        last = at
        out.append(Message(str(role), content if clean else clean_text(content), at))
    return out


def json_error(exc: ValueError, line: str | bytes) -> str:
    """Why a line of a JSON Lines file is not JSON, placed by its column only (the caller
    gives the line's number: one number per error)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    if text.lstrip().startswith("["):
        return "a JSON array, not JSON Lines: give one record per line (e.g. jq -c '.[]' FILE)"
    if isinstance(exc, json.JSONDecodeError):
        end = exc.lineno > 1 or exc.pos >= len(text.rstrip("\r\n"))
        msg = exc.msg.removesuffix(" at")  # "Unterminated string starting at": the place follows once
        return f"not valid JSON: {msg} " + ("at the end of the line" if end else f"at column {exc.colno}")
    return f"not valid JSON ({exc})"


def parse_line(line: str | bytes, *, index: int | None = None, source: str = "") -> Trajectory:
    if len(line) > MAX_LINE_BYTES:
        raise InvalidTrajectory(f"line longer than {MAX_LINE_BYTES} bytes", index=index, source=source)
    try:
        data = loads(line)
    except ValueError as exc:
        raise InvalidTrajectory(json_error(exc, line), index=index, source=source) from None
    return parse_record(data, index=index, source=source)


def iter_jsonl(stream: IO[str], *, source: str = "") -> Iterator[Trajectory]:
    """Stream trajectories from a JSONL text stream; blank lines are skipped.
    Memory does not grow with the file."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        yield parse_line(line, index=number, source=source)


READ_BUFFER = 1 << 20  # bytes read at a time: records of 10 KiB and more took two reads each with 8 KiB


def read_jsonl(path: str | Path) -> Iterator[Trajectory]:
    """Stream a JSONL file; bytes go straight to the JSON parser (which
    refuses text that is not UTF-8, naming the line)."""
    p = Path(path)
    source = str(p)
    with p.open("rb", buffering=READ_BUFFER) as fh:
        for number, line in enumerate(fh, start=1):
            if len(line) <= MAX_LINE_BYTES:
                try:
                    data = loads(line)
                except ValueError:
                    pass  # blank, or parse_line names the error
                else:
                    yield parse_record(data, index=number, source=source, clean=needs_no_cleaning(line))
                    continue
            if line.strip():
                yield parse_line(line, index=number, source=source)
