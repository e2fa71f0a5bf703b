"""Running agents under test on cases, producing trajectory records (docs/formats.md).

An agent is any callable ``agent(question, toolbox) -> answer``, sync or
async. The recovery sweep runs a case once per expected step ``i``, failing
the ``i``-th call, as the seed does.

A multi-turn case is one conversation: the agent answers each user message
in turn (scripted ``turns``, or a simulated user's replies), all its calls in
one trajectory whose ``messages`` keep the user's and the agent's words with
the number of calls made before each. An agent with ``new_conversation()``
gets a fresh conversation object per case run (it keeps its own history); any
other agent is called once per user message, the conversation so far on
``toolbox.messages``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from app.core.errors import ToolLensError
from app.core.records import AgentError, Call, Message, Trajectory, UserError
from app.core.run.conversation import SimulatedUser, check_user
from app.core.run.router import FaultPlan, MockRouter, Toolbox
from app.core.suites.suite import Case, Suite


class Agent(Protocol):
    """The agent protocol: return the final answer; call tools through the toolbox."""

    def __call__(self, question: str, toolbox: Toolbox, /) -> str | Awaitable[str]: ...


class ConversationalAgent(Protocol):
    """An agent that keeps a conversation's history itself: ``new_conversation()``
    returns a callable ``(user_message, toolbox) -> answer`` for one case run."""

    def new_conversation(self) -> Callable[[str, Toolbox], str | Awaitable[str]]: ...


class NoUser(ToolLensError):
    """A case with a simulated user was run without one."""


def _finish(case: Case, trial: int, router: MockRouter, answer: Any, plan: FaultPlan | None) -> Trajectory:
    fault = router.first_fault
    if fault is None and plan is not None:
        fault = plan.planned()  # the planned fault was never reached: still say what was planned
    return Trajectory(
        case_id=case.id,
        trial=trial,
        question=case.question,
        calls=[_clean_call(c) for c in router.log],
        answer=clean_text("" if answer is None else str(answer)),
        fault=fault,
        state=dict(router.state),
        stopped=router.stopped,
        model_calls=router.model_calls or None,
        agent_error=router.agent_error,
    )


MAX_TEXT = 1_000_000  # characters of an answer or of raw arguments kept from a live agent


def clean_text(text: str) -> str:
    """Agent output as a store can hold it: NUL characters (which PostgreSQL
    text refuses) shown as U+FFFD, and at most MAX_TEXT characters."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " …[cut]"


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    return value


def _clean_call(call: Call) -> Call:
    if call.raw_arguments is not None:
        call.raw_arguments = clean_text(call.raw_arguments)
    call.arguments = _clean_value(call.arguments)
    call.name = clean_text(call.name)
    if call.observation is not None:
        call.observation = clean_text(call.observation)
    return call


def _router(suite: Suite, case: Case, faults: FaultPlan | None) -> MockRouter:
    return MockRouter(suite.toolset, faults, mocks=case.mocks)


AGENT_ERROR = "agent_error"


async def arun_case(
    agent: Agent | Callable[..., Any],
    suite: Suite,
    case: Case,
    *,
    trial: int = 0,
    faults: FaultPlan | None = None,
    record_crash: bool = False,
    user: SimulatedUser | None = None,
) -> Trajectory:
    """Run one case once (async agents are awaited; sync ones run in a thread).

    With ``record_crash`` an exception raised by the agent ends the
    trajectory with ``stopped="agent_error"`` and the calls made so far; an
    InfrastructureError (the model endpoint, not the agent) is always raised.
    A case with a simulated user needs ``user`` (it says the replies).
    """
    router = _router(suite, case, faults)
    toolbox = Toolbox(router)
    if case.multi_turn:
        return await _converse(agent, case, trial, router, toolbox, faults, record_crash, user)
    toolbox.messages = [{"role": "user", "content": case.question}]
    answer = await _ask(agent, case.question, toolbox, router, record_crash)
    return _finish(case, trial, router, answer, faults)


async def _ask(agent: Any, message: str, toolbox: Toolbox, router: MockRouter, record_crash: bool) -> Any:
    """One answer of the agent to one user message."""
    try:
        if inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(type(agent).__call__):
            answer: Any = agent(message, toolbox)
        else:
            answer = await asyncio.to_thread(agent, message, toolbox)
        if inspect.isawaitable(answer):
            answer = await answer
    except ToolLensError:
        raise
    except Exception as exc:
        if not record_crash:
            raise
        router.stopped, answer = router.stopped or AGENT_ERROR, ""
        router.agent_error = AgentError.from_exception(exc)  # its type, message and last frames, bounded
    return answer


async def _converse(
    agent: Any,
    case: Case,
    trial: int,
    router: MockRouter,
    toolbox: Toolbox,
    faults: FaultPlan | None,
    record_crash: bool,
    user: SimulatedUser | None,
) -> Trajectory:
    """Every turn of a conversation: the agent answers each user message; the
    next one is the script's, or the simulated user's reply (until it says its
    stop string or nothing, or has replied ``patience`` times). A turn that ends the
    agent's loop early (a step limit, a crash) ends the conversation."""
    spec = case.user
    if spec is not None and user is None:
        raise NoUser(f"case {case.id!r} has a simulated user: give one (app.agents.users.RuleUser, or --user-model)")
    if spec is not None and user is not None and hasattr(user, "for_conversation"):
        user = user.for_conversation(case.id, trial)  # a seeded user of its own per case run (a profile)
    speaker = agent.new_conversation() if hasattr(agent, "new_conversation") else agent
    messages: list[Message] = []
    text: str | None = case.question
    answer: Any = ""
    turn = 0
    while text is not None:
        turn += 1
        router.begin_turn(turn)
        messages.append(Message("user", clean_text(text), len(router.log)))
        toolbox.messages = [{"role": m.role, "content": m.content} for m in messages]
        answer = await _ask(speaker, text, toolbox, router, record_crash)
        messages.append(Message("assistant", clean_text("" if answer is None else str(answer)), len(router.log)))
        text = None
        if router.stopped is not None:
            break
        if case.turns is not None:
            text = case.turns[turn].user if turn < len(case.turns) else None
        elif spec is not None and user is not None and turn <= spec.patience:
            reply = user.reply(spec, list(messages))
            said = clean_text(str(await reply if inspect.isawaitable(reply) else reply))
            if spec.stop in said:
                messages.append(Message("user", said, len(router.log)))
            elif said.strip():  # a user that says nothing has left
                text = said
    traj = _finish(case, trial, router, answer, faults)
    traj.messages = messages
    errors = check_user(spec, messages) if spec is not None else []
    traj.user_error = [UserError(e["kind"], e["detail"]) for e in errors] or None
    if spec is not None and user is not None:  # which user played it, and what its profile did on purpose
        traj.user_profile = str(getattr(user, "profile", "") or "") or None
        traj.user_acts = list(getattr(user, "acts", None) or []) or None
    return traj


def run_case(
    agent: Agent | Callable[..., Any],
    suite: Suite,
    case: Case,
    *,
    trial: int = 0,
    faults: FaultPlan | None = None,
    user: SimulatedUser | None = None,
) -> Trajectory:
    """Run one case once, synchronously (an async agent gets its own loop, and
    its ``aclose()``, when it has one, before that loop ends)."""
    if case.multi_turn:
        traj: Trajectory = asyncio.run(
            _await(arun_case(agent, suite, case, trial=trial, faults=faults, user=user), agent)
        )
        return traj
    router = _router(suite, case, faults)
    toolbox = Toolbox(router)
    toolbox.messages = [{"role": "user", "content": case.question}]
    answer = agent(case.question, toolbox)
    if inspect.isawaitable(answer):
        answer = asyncio.run(_await(answer, agent))
    return _finish(case, trial, router, answer, faults)


async def _await(value: Awaitable[Any], agent: Any) -> Any:
    try:
        return await value
    finally:
        close = getattr(agent, "aclose", None)
        if close is not None and inspect.iscoroutinefunction(close):
            await close()


def sweep_plans(case: Case, kind: str = "http_503", *, clear_on_retry: bool = False) -> list[FaultPlan]:
    """One fault plan per expected step i, failing the i-th call; in a scripted
    conversation, step j of turn t fails the j-th call of that turn."""
    if case.turns is not None:
        return [
            FaultPlan(by_turn={(t, j): kind}, clear_on_retry=clear_on_retry)
            for t, turn in enumerate(case.turns, start=1)
            for j in range(len(turn.expected_calls or []))
        ]
    steps = len(case.expected_calls or [])
    return [FaultPlan(by_index={i: kind}, clear_on_retry=clear_on_retry) for i in range(steps)]


def recovery_sweep(
    agent: Agent | Callable[..., Any],
    suite: Suite,
    case: Case,
    *,
    kind: str = "http_503",
    trial: int = 0,
    user: SimulatedUser | None = None,
) -> list[Trajectory]:
    """Run the case once per expected step i, failing that step's call; run i
    is trial ``trial + i``, so each run of the sweep has a trial of its own."""
    return [
        run_case(agent, suite, case, trial=trial + i, faults=plan, user=user)
        for i, plan in enumerate(sweep_plans(case, kind))
    ]


def run_suite(
    agent: Agent | Callable[..., Any],
    suite: Suite,
    *,
    trials: int = 1,
    faults: FaultPlan | None = None,
    sweep: bool = False,
    sweep_kind: str = "http_503",
    user: SimulatedUser | None = None,
) -> Iterator[Trajectory]:
    """Every case ``trials`` times (each trial with the plan reseeded by trial
    number), then, with ``sweep``, the recovery sweep of every case, numbered
    after the plain trials (so that no two runs of a case share a trial)."""
    for case in suite.cases:
        for t in range(trials):
            plan = None if faults is None else replace(faults, seed=faults.seed + t)
            yield run_case(agent, suite, case, trial=t, faults=plan, user=user)
    if sweep:
        for case in suite.cases:
            yield from recovery_sweep(agent, suite, case, kind=sweep_kind, trial=trials, user=user)
