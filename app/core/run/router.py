"""The mock router: executes mocked tools, injects faults, records every call.

The agent sees the production contract; the router replaces only the
execution. Unknown names, invalid arguments, injected faults and the tool's
own errors all come back to the agent as error observations, and every call
lands in the log from which the trajectory record is built.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import ToolLensError
from app.core.records import (
    FAULT_KINDS,
    MAX_CALLS,
    MAX_INDEX,
    MAX_NAME,
    TRANSIENT_KINDS,
    AgentError,
    Call,
    CallError,
    Fault,
    parse_arguments,
)
from app.core.suites.mocks import MockSpec, ToolFailure, render_observation
from app.core.suites.tools import Toolset
from app.core.usage import MAX_MODEL_CALLS, ModelCall, parse_model_calls

FAULT_MESSAGES = {
    "timeout": "ERROR: timeout: the tool did not answer in time",
    "http_429": "ERROR 429: too many requests, retry later",
    "http_503": "ERROR 503: service unavailable",
    "http_500": "ERROR 500: internal server error",
    "not_found": "ERROR 404: not found",
    "malformed": '{"status": "ok", "data": {"valu',
}


class FaultSpecError(ToolLensError):
    """A fault plan written on the command line or in a config is malformed."""


@dataclass
class FaultPlan:
    """Which calls fail, and how.

    ``by_index`` fails the call at that 0-based index; ``by_turn`` fails the
    call at index ``i`` within user turn ``t`` (``(t, i)``, turns from 1, as
    the router counts them: ``MockRouter.begin_turn``); ``by_tool`` fails calls
    to that tool (every call, or only the first of a retry streak when
    ``clear_on_retry``); ``probability`` fails any call with that chance,
    drawn from a generator seeded with ``seed`` so that runs repeat.
    ``delay_ms`` makes an injected fault answer that much later (a slow
    timeout); the call records it as its error's ``delay_ms``.
    """

    by_index: dict[int, str] = field(default_factory=dict)
    by_turn: dict[tuple[int, int], str] = field(default_factory=dict)
    by_tool: dict[str, str] = field(default_factory=dict)
    probability: float = 0.0
    kinds: tuple[str, ...] = ("http_503",)
    seed: int = 0
    clear_on_retry: bool = False
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        for kind in [*self.by_index.values(), *self.by_turn.values(), *self.by_tool.values(), *self.kinds]:
            if kind not in FAULT_KINDS:
                raise FaultSpecError(f"unknown fault kind {kind!r} (known: {', '.join(FAULT_KINDS)})")
        if not 0.0 <= self.probability <= 1.0:
            raise FaultSpecError("probability must be between 0 and 1")
        if not 0.0 <= self.delay_ms <= 600_000:
            raise FaultSpecError("delay must be between 0 and 600000 milliseconds")

    @property
    def empty(self) -> bool:
        return not self.by_index and not self.by_turn and not self.by_tool and self.probability == 0.0

    def planned(self) -> Fault | None:
        """The first fault the plan names by position, as a record says it
        when the run never reached it: a call index, or no index (``step``
        None) for a turn's call, whose index depends on the earlier turns."""
        if self.by_index:
            step = min(self.by_index)
            return Fault(step=step, kind=self.by_index[step])
        if self.by_turn:
            return Fault(step=None, kind=self.by_turn[min(self.by_turn)])
        return None

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Read ``index:1=http_503,tool:ver_saldo=timeout,p:0.1,kinds:http_429|timeout,seed:7,clear,delay:250``.

        ``turn:N`` makes the ``index:`` rules after it (up to the next
        ``turn:``) count within user turn N: ``turn:2,index:0=http_503`` fails
        the first call the agent makes after the user's second message."""
        plan: dict[str, Any] = {"by_index": {}, "by_tool": {}, "by_turn": {}}
        turn: int | None = None
        turn_used = True
        for raw in filter(None, (part.strip() for part in spec.split(","))):
            key, _, rest = raw.partition(":")
            try:
                if key == "turn":
                    if not turn_used:
                        raise FaultSpecError(f"turn:{turn} needs an index:I=kind rule after it")
                    turn, turn_used = int(rest), False
                    if not 1 <= turn <= MAX_INDEX:
                        raise FaultSpecError(f"turn:{rest}: turns are numbered from 1")
                elif key == "index":
                    idx, _, kind = rest.partition("=")
                    if turn is None:
                        plan["by_index"][int(idx)] = kind or "http_503"
                    else:
                        plan["by_turn"][(turn, int(idx))] = kind or "http_503"
                        turn_used = True
                elif key == "tool":
                    name, _, kind = rest.partition("=")
                    plan["by_tool"][name] = kind or "http_503"
                elif key == "p":
                    plan["probability"] = float(rest)
                elif key == "kinds":
                    plan["kinds"] = tuple(rest.split("|"))
                elif key == "seed":
                    plan["seed"] = int(rest)
                elif key == "delay":
                    plan["delay_ms"] = float(rest)
                elif raw == "clear":
                    plan["clear_on_retry"] = True
                else:
                    raise FaultSpecError(f"unknown fault rule {raw!r}")
            except ValueError:
                raise FaultSpecError(f"cannot read fault rule {raw!r}") from None
        if not turn_used:
            raise FaultSpecError(f"turn:{turn} needs an index:I=kind rule after it")
        return cls(**plan)


class CallLimitReached(Exception):
    """The agent made more calls than a trajectory record may hold."""


class MockRouter:
    """Executes calls against mocked tools for one trajectory."""

    def __init__(
        self,
        toolset: Toolset,
        faults: FaultPlan | None = None,
        *,
        mocks: Mapping[str, MockSpec] | None = None,
        state: dict[str, Any] | None = None,
    ):
        self.toolset = toolset
        self.faults = faults or FaultPlan()
        self.mocks = dict(mocks or {})
        self.state: dict[str, Any] = state if state is not None else {}
        self.log: list[Call] = []
        self._raw: str | None = None
        self._rng = random.Random(self.faults.seed)
        self.stopped: str | None = None  # set by an agent loop that ended early (e.g. "step_limit")
        self.agent_error: AgentError | None = None  # what the agent raised (the runner's record_crash)
        self.model_calls: list[ModelCall] = []  # the agent's requests to the model, when it reports them
        self._started = 0.0
        self._wait = True
        self.turn = 1  # the user turn in progress (a conversation's runner moves it on)
        self._turn_start = 0  # index of the turn's first call

    def begin_turn(self, turn: int) -> None:
        """The user said turn ``turn``'s message: calls from now on count in it."""
        self.turn, self._turn_start = turn, len(self.log)

    @property
    def first_fault(self) -> Fault | None:
        for i, call in enumerate(self.log):
            if call.error is not None and call.error.injected:
                return Fault(step=i, kind=call.error.kind)
        return None

    def _fault_for(self, index: int, name: str) -> str | None:
        plan = self.faults
        if index in plan.by_index:
            return plan.by_index[index]
        if plan.by_turn:
            kind = plan.by_turn.get((self.turn, index - self._turn_start))
            if kind is not None:
                return kind
        if name in plan.by_tool:
            prev = self.log[-1] if self.log else None
            retrying = prev is not None and prev.name == name and prev.error is not None and prev.error.injected
            kind = plan.by_tool[name]
            if plan.clear_on_retry and retrying and kind in TRANSIENT_KINDS:
                return None
            return kind
        if plan.probability and self._rng.random() < plan.probability:
            return plan.kinds[self._rng.randrange(len(plan.kinds))]
        return None

    def call(self, name: str, arguments: Any, *, wait: bool = True) -> str:
        """Run one call and return the observation the agent reads; its
        ``latency_ms`` is the wall time, an injected delay included (slept
        here, or by the caller when ``wait`` is False: ``Toolbox.acall``)."""
        self._started = time.perf_counter()
        self._wait = wait
        index = len(self.log)
        if index >= MAX_CALLS:
            self.stopped = "call_limit"
            raise CallLimitReached(f"more than {MAX_CALLS} calls in one trajectory")
        if len(name) > MAX_NAME:
            name = name[:MAX_NAME]  # a name that long is no tool's: recorded cut, as an unknown tool
        self._raw = arguments if isinstance(arguments, str) else None
        args = parse_arguments(arguments)
        tool = self.toolset.get(name)
        if tool is None:
            return self._record(name, args, f"ERROR: tool '{name}' does not exist", CallError("unknown_tool"))
        violation = tool.validator.validate(args)
        if violation is not None:
            return self._record(name, args, f"ERROR: invalid arguments: {violation.message}", CallError("schema"))
        kind = self._fault_for(index, name)
        if kind is not None:
            delay = self.faults.delay_ms or None
            if delay is not None and wait:
                time.sleep(delay / 1000)
            return self._record(name, args, FAULT_MESSAGES[kind], CallError(kind, injected=True, delay_ms=delay))
        before: dict[str, Any] | None = None
        try:
            if tool.responder is not None and name not in self.mocks:
                before = copy.deepcopy(self.state)  # a failed call changes no state: undone if it raises
                value = tool.responder(dict(args), self.state)
            else:
                mock = self.mocks.get(name, tool.mock)
                value = mock.respond(dict(args), self.state) if mock is not None else {"status": "ok"}
        except ToolFailure as failure:
            if before is not None:
                self.state.clear()
                self.state.update(before)
            return self._record(name, args, failure.message, CallError(failure.kind))
        return self._record(name, args, render_observation(value), None)

    def _record(self, name: str, args: Any, observation: str, error: CallError | None) -> str:
        if error is not None:
            error.message = observation
        latency = (time.perf_counter() - self._started) * 1000
        if not self._wait and error is not None and error.delay_ms is not None:
            latency += error.delay_ms  # the caller sleeps it
        self.log.append(
            Call(
                name=name,
                arguments=args,
                observation=observation,
                error=error,
                raw_arguments=self._raw,
                latency_ms=round(latency, 3),
            )
        )
        return observation


class Toolbox:
    """What an agent under test is handed: the tools exactly as production
    declares them, and ``call(name, arguments)``."""

    def __init__(self, router: MockRouter):
        self._router = router
        self.tools = list(router.toolset.tools)
        # a conversation so far ({role, content}, the latest user message last), for agents that keep no history
        self.messages: list[dict[str, str]] = []

    @property
    def openai_tools(self) -> list[dict[str, Any]]:
        return self._router.toolset.openai_tools()

    @property
    def anthropic_tools(self) -> list[dict[str, Any]]:
        return self._router.toolset.anthropic_tools()

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def call(self, name: str, arguments: Any = None) -> str:
        return self._router.call(name, arguments)

    @property
    def last_failed(self) -> bool:
        """Whether the latest call came back as an error (for ``is_error`` flags)."""
        log = self._router.log
        return bool(log) and log[-1].error is not None

    def stop(self, reason: str) -> None:
        """Record why the agent loop ended without a final answer (e.g. ``step_limit``)."""
        self._router.stopped = reason[:40]

    def record_model_call(self, call: ModelCall) -> None:
        """Report one request to the model (tokens, latency, model name): the
        runner's agents do; any agent may. Checked as a record's entry is
        (ValueError naming the field); past MAX_MODEL_CALLS, not kept."""
        calls = self._router.model_calls
        if len(calls) < MAX_MODEL_CALLS:
            calls.extend(parse_model_calls([call.to_dict()], lambda message, where: ValueError(f"{where}: {message}")))

    async def acall(self, name: str, arguments: Any = None) -> str:
        observation = self._router.call(name, arguments, wait=False)
        error = self._router.log[-1].error if self._router.log else None
        if error is not None and error.delay_ms is not None:
            await asyncio.sleep(error.delay_ms / 1000)
        return observation
