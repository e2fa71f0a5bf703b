"""One ``toollens run`` invocation: create, join (``--shard``) or resume a
run, work out what is missing, run it, and finish the run when it is whole."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.agents.profiles import ProfiledUser
from app.agents.retry import RetryPolicy
from app.agents.users import LLMUser, RuleUser
from app.core.errors import ToolLensError
from app.core.records import FAULT_KINDS
from app.core.reports.profiles import COOPERATIVE, parse_profiles
from app.core.run.conversation import SimulatedUser
from app.core.run.router import FaultPlan
from app.core.suites.suite import Suite, load_suite_document, parse_suite
from app.runner.agents import agent_kind, agent_label
from app.runner.execute import AgentFactory, Listener, RunSummary, execute
from app.runner.request import AGENT_KEYS as AGENT_KEYS
from app.runner.request import RUNNER_MARK as RUNNER_MARK
from app.runner.request import RUNNER_VERSION as RUNNER_VERSION
from app.runner.request import WORK_KEYS as WORK_KEYS
from app.runner.request import RunRequest as RunRequest
from app.runner.request import RunSetupError as RunSetupError
from app.runner.work import WorkItem, in_shard, parse_shard, plan_work, still_missing
from app.settings import Settings
from app.store import aggregates, ingest
from app.store.db import make_sessionmaker, session_scope
from app.store.errors import Conflict
from app.store.importer import open_store
from app.store.infra import infra_errors
from app.store.models import Run


@dataclass
class RunOutcome:
    run_id: int
    run_name: str
    planned: int  # items of this invocation (its shard), before skipping what is stored
    summary: RunSummary
    finished: bool
    retries: int = 0


def build_factory(request: RunRequest, suite: Suite) -> AgentFactory:
    """The agent the request names, as a per-case factory."""
    return agent_kind(request.agent).build(request, suite)


def build_user(request: RunRequest, profile: str = COOPERATIVE) -> SimulatedUser:
    """The simulated user of the run's conversations: the user model named by
    ``--user-model`` (an OpenAI-compatible endpoint), else the rule-based one;
    under a profile other than the cooperative one, the rule-based user is
    seeded by ``--seed`` (app/agents/profiles.py) and the model is told the profile."""
    if not request.user_model:
        return RuleUser() if profile == COOPERATIVE else ProfiledUser(profile, request.seed)
    user = LLMUser(
        model=request.user_model,
        base_url=request.user_base_url or request.base_url,
        temperature=request.temperature,
        timeout=request.timeout,
        retry=RetryPolicy(attempts=request.attempts, base=request.backoff),
        profile=profile,
    )
    user.preload()
    return user


def build_users(request: RunRequest) -> dict[str, SimulatedUser]:
    """One simulated user per profile the run asks for (the cooperative one always)."""
    return {p: build_user(request, p) for p in request.user_profiles or [COOPERATIVE]}


def check_agent(request: RunRequest) -> None:
    """Refuse a bad ``--agent`` (or its options) before anything is stored."""
    agent_kind(request.agent).check(request)


def _retries(factory: AgentFactory) -> int:
    agent = getattr(factory, "agent", None)
    retry = getattr(agent, "retry", None)
    return retry.retries if isinstance(retry, RetryPolicy) else 0


def _default_name(request: RunRequest, suite: Suite) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    who = request.model or request.agent.replace(":", ".")
    return f"{suite.name}-{who}-{stamp}"[:200]


def _open_run(session: Session, request: RunRequest) -> tuple[Run, dict[str, Any]]:
    """The run this invocation writes to, and the document of its suite."""
    if request.resume:
        run = ingest.find_run(session, request.resume)
        if (run.config or {}).get(RUNNER_MARK) != RUNNER_VERSION:
            raise RunSetupError(f"run {run.name!r} was not made by `toollens run`: there is nothing to resume")
        return run, ingest.suite_document(session, run.suite_id)
    if request.suite_document is not None:
        document = request.suite_document
    elif request.suite_path is not None:
        document = load_suite_document(request.suite_path)
    else:
        raise RunSetupError("give a SUITE file, or --resume RUN")
    suite = parse_suite(document, path=str(request.suite_path or "suite"))
    suite_row = ingest.ensure_suite(session, document)
    name = request.run_name or _default_name(request, suite)
    existing = session.scalar(select(Run).where(Run.name == name))
    if existing is None:
        try:
            with session.begin_nested():  # shards starting together: one creates, the others join
                model = request.model or agent_kind(request.agent).model_label(request)
                run = ingest.create_run(
                    session,
                    name=name,
                    suite_row=suite_row,
                    agent=agent_label(request.agent),
                    model=model,
                    config=request.config(),
                )
                session.flush()
            return run, document
        except (Conflict, IntegrityError):
            existing = session.scalar(select(Run).where(Run.name == name))
            if existing is None:
                raise
    if not request.shard:
        raise RunSetupError(f"a run named {name!r} exists already: --resume {name} continues it")
    if existing.suite_id != suite_row.id:
        raise RunSetupError(f"run {name!r} was started with another suite")
    _check_same(existing.config, request.config(), WORK_KEYS + AGENT_KEYS, name)
    return existing, document


def _check_same(stored: dict[str, Any], given: dict[str, Any], keys: tuple[str, ...], name: str) -> None:
    defaults = RunRequest().config()  # a key a run's config lacks (it predates the key) holds its default
    for key in keys:
        if stored.get(key, defaults.get(key)) != given.get(key):
            raise RunSetupError(f"run {name!r} was started with {key}={stored.get(key)!r}, not {given.get(key)!r}")


def _resumed_request(request: RunRequest, config: dict[str, Any]) -> RunRequest:
    """A resumed run runs the work and the agent it was started with; only
    how (concurrency, timeouts, retries, sharding) may change."""
    known = {k: config[k] for k in (*WORK_KEYS, *AGENT_KEYS) if k in config}
    return RunRequest(**{**asdict(request), **known, "suite_document": None})


def _work_options(request: RunRequest) -> tuple[FaultPlan | None, tuple[int, int] | None]:
    """Every option that shapes the work, checked before anything is stored."""
    if request.trials < 1:
        raise RunSetupError("--trials must be at least 1")
    if request.sweep_kind not in FAULT_KINDS:
        raise RunSetupError(f"--sweep-kind {request.sweep_kind!r} is not a fault kind ({', '.join(FAULT_KINDS)})")
    try:
        faults = FaultPlan.parse(request.faults) if request.faults else None
    except ToolLensError as exc:
        raise RunSetupError(f"--faults: {exc}") from None
    try:
        parse_profiles(request.user_profiles)
    except ToolLensError as exc:
        raise RunSetupError(str(exc)) from None
    return faults, parse_shard(request.shard) if request.shard else None


def prepare(
    sessions: sessionmaker[Session], request: RunRequest
) -> tuple[int, str, Suite, RunRequest, list[WorkItem], list[WorkItem]]:
    """Open the run; return its id and name, the suite, the effective request,
    every item of the run, and the items this invocation still has to run."""
    with session_scope(sessions, write=True) as session:
        run, document = _open_run(session, request)
        if request.resume:
            request = _resumed_request(request, run.config or {})
        run_id, run_name = run.id, run.name
        stored = ingest.stored_keys(session, run_id)
        finished, has_infra = run.status == "finished", bool(infra_errors(session, run_id, limit=1))
    faults, shard = _work_options(request)
    suite = parse_suite(document, path="suite")
    everything = plan_work(
        suite,
        trials=request.trials,
        faults=faults,
        sweep=request.sweep,
        sweep_kind=request.sweep_kind,
        profiles=parse_profiles(request.user_profiles),
    )
    todo = still_missing(everything, stored)
    if shard is not None:
        todo = [item for item in todo if in_shard(item, *shard)]
    if todo and finished and not has_infra:
        raise RunSetupError(f"run {run_name!r} is finished: it takes no new trajectories")
    return run_id, run_name, suite, request, everything, todo


def run_agent(
    settings: Settings, request: RunRequest, *, progress: Callable[[str, int], Any] | None = None
) -> RunOutcome:
    """Run (or resume, or join as a shard) and store every finished case run.

    ``progress(title, total)`` may return a context manager with an
    ``update(summary)`` method (the rich bar of the CLI)."""
    if not request.resume:
        _work_options(request)
        check_agent(request)  # a bad option or --agent creates no run, nor a database
    engine = open_store(settings)
    sessions = make_sessionmaker(engine)
    try:
        run_id, run_name, suite, request, everything, todo = prepare(sessions, request)
        factory = build_factory(request, suite)
        users = build_users(request) if any(c.user is not None for c in suite.cases) else None
        with session_scope(sessions, write=True) as session:
            run = ingest.get_run_row(session, run_id)
            if todo and run.status == "finished":
                run.status, run.finished_at = "running", None  # infrastructure errors left to retry
        summary = _execute(factory, suite, todo, sessions, run_id, request.concurrency, run_name, progress, users)
        finished = _finish_if_whole(sessions, run_id, everything)
        return RunOutcome(run_id, run_name, len(todo), summary, finished, _retries(factory))
    finally:
        engine.dispose()


def _execute(
    factory: AgentFactory,
    suite: Suite,
    todo: list[WorkItem],
    sessions: sessionmaker[Session],
    run_id: int,
    concurrency: int,
    title: str,
    progress: Callable[[str, int], Any] | None,
    users: dict[str, SimulatedUser] | None,
) -> RunSummary:
    if progress is None:
        return asyncio.run(
            execute(factory, suite, todo, sessions=sessions, run_id=run_id, concurrency=concurrency, users=users)
        )
    with progress(title, len(todo)) as bar:
        listener: Listener = bar.update
        return asyncio.run(
            execute(
                factory,
                suite,
                todo,
                sessions=sessions,
                run_id=run_id,
                concurrency=concurrency,
                listener=listener,
                users=users,
            )
        )


def _finish_if_whole(sessions: sessionmaker[Session], run_id: int, everything: list[WorkItem]) -> bool:
    """Close the run once every item of every shard is stored and no
    infrastructure error is left."""
    with session_scope(sessions, write=True) as session:
        stored = ingest.stored_keys(session, run_id)
        if still_missing(everything, stored) or infra_errors(session, run_id, limit=1):
            return False
        aggregates.finish_run(session, run_id)
    return True
