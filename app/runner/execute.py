"""Run work items concurrently and store each finished trajectory at once.

N workers run case items through the agent; one writer stores what they
finish, in its own transaction per batch of whatever is ready, so a crash or
Ctrl-C loses nothing already finished. A model endpoint that keeps failing
makes an infrastructure error (stored apart, retried by ``--resume``); an
endpoint that refuses the request (a bad key, an unknown model) stops the run.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import InfrastructureError
from app.core.records import Trajectory
from app.core.reports.profiles import COOPERATIVE
from app.core.run.conversation import SimulatedUser
from app.core.run.runner import AGENT_ERROR, arun_case
from app.core.score.scoring import Scorer, TrajectoryScore
from app.core.suites.suite import Case, Suite
from app.runner.work import WorkItem
from app.store import ingest
from app.store.db import session_scope
from app.store.errors import Conflict, Unstorable
from app.store.infra import clear_infra_error, infra_errors, record_infra_error


class AgentFactory(Protocol):
    label: str

    def for_case(self, case: Case, trial: int, variant: str = "") -> Callable[..., Any]: ...


@dataclass
class RunSummary:
    total: int
    stored: int = 0
    failed: int = 0  # stored trajectories that did not pass
    agent_errors: int = 0  # the agent raised (stored, stopped="agent_error")
    agent_error_types: Counter[str] = field(default_factory=Counter)  # of them, by the exception's type
    infra_errors: int = 0  # the endpoint kept failing (not stored as trajectories)
    duplicates: int = 0  # stored already (another shard, or the same experiment twice)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @property
    def done(self) -> int:
        return self.stored + self.infra_errors + self.duplicates

    @property
    def elapsed(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


Listener = Callable[[RunSummary], None]


class _Writer:
    """Stores finished trajectories (and infrastructure errors) for one run."""

    def __init__(self, factory: sessionmaker[Session], run_id: int, suite: Suite, summary: RunSummary):
        self.factory = factory
        self.run_id = run_id
        self.scorer = _ScoredOnce(Scorer(suite))
        self.summary = summary
        with session_scope(factory) as session:  # only then can a stored trajectory clear one
            self.infra_known = bool(infra_errors(session, run_id, limit=1))

    def store(self, batch: list[tuple[WorkItem, Trajectory | InfrastructureError]]) -> None:
        """Store a batch in one transaction; when that fails, each on its own,
        so that one trajectory the database refuses costs only itself."""
        trajs = [(item, r) for item, r in batch if isinstance(r, Trajectory)]
        errors: list[tuple[WorkItem, str]] = [(item, str(r)) for item, r in batch if not isinstance(r, Trajectory)]
        if trajs:
            try:
                self._store([t for _, t in trajs])
            except (Conflict, Unstorable):
                for item, t in trajs:
                    try:
                        self._store([t])
                    except Conflict:
                        self.summary.duplicates += 1  # another process stored this case run
                    except Unstorable as exc:
                        errors.append((item, f"the trajectory could not be stored: {exc}"))
        for item, message in errors:
            with session_scope(self.factory, write=True) as session:
                record_infra_error(session, self.run_id, item.case.id, item.trial, "", message)
            self.summary.infra_errors += 1
            self.infra_known = True

    def _store(self, trajs: list[Trajectory]) -> None:
        with session_scope(self.factory, write=True) as session:
            run = ingest.get_run_row(session, self.run_id)
            ingest.add_trajectories(session, run=run, scorer=self.scorer, trajectories=trajs)
            if self.infra_known:
                for t in trajs:
                    clear_infra_error(session, self.run_id, t.case_id, t.trial)
        self.summary.stored += len(trajs)
        self.summary.failed += sum(1 for t in trajs if not self.scorer.score(t).passed)
        self.summary.agent_errors += sum(1 for t in trajs if t.stopped == AGENT_ERROR)
        self.summary.agent_error_types.update(t.agent_error.type for t in trajs if t.agent_error is not None)
        self.scorer.forget(trajs)


class _ScoredOnce:
    """A scorer that remembers the score of each trajectory of the batch in
    hand, so the store and the tally do not score twice."""

    def __init__(self, scorer: Scorer):
        self.scorer = scorer
        self.memo: dict[int, TrajectoryScore] = {}

    def score(self, traj: Trajectory) -> TrajectoryScore:
        found = self.memo.get(id(traj))
        if found is None:
            found = self.memo[id(traj)] = self.scorer.score(traj)
        return found

    def forget(self, trajs: list[Trajectory]) -> None:
        for t in trajs:
            self.memo.pop(id(t), None)


async def execute(
    factory: AgentFactory,
    suite: Suite,
    items: list[WorkItem],
    *,
    sessions: sessionmaker[Session],
    run_id: int,
    concurrency: int = 4,
    listener: Listener | None = None,
    user: SimulatedUser | None = None,
    users: Mapping[str, SimulatedUser] | None = None,
) -> RunSummary:
    """Run ``items`` with ``concurrency`` in flight; returns the tally. An
    EndpointRejected (or any error that is not the agent's) stops the run
    after storing everything finished so far. A conversation is one item:
    stored whole when its last turn ends, or not at all (``user`` says the
    simulated user's replies; ``users``, one per profile, the replies of the
    items under that profile)."""
    by_profile: dict[str, SimulatedUser] = dict(users or {})
    if user is not None:
        by_profile.setdefault(COOPERATIVE, user)
    summary = RunSummary(total=len(items))
    writer = _Writer(sessions, run_id, suite, summary)
    width = max(1, min(concurrency, len(items) or 1))
    # synchronous agents run in threads: as many as cases in flight, plus the writer
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=width + 1))
    queue: asyncio.Queue[tuple[WorkItem, Trajectory | InfrastructureError] | None] = asyncio.Queue(2 * width)
    pending: Iterator[WorkItem] = iter(items)
    closers: dict[int, Callable[[], Awaitable[None]]] = {}  # agents with connections to close at the end

    async def work() -> None:
        for item in pending:  # workers share one iterator: each item runs once
            agent = factory.for_case(item.case, *item.agent_seed())
            close = getattr(agent, "aclose", None)
            if close is not None and inspect.iscoroutinefunction(close):
                closers.setdefault(id(agent), close)
            try:
                result: Trajectory | InfrastructureError = await arun_case(
                    agent,
                    suite,
                    item.case,
                    trial=item.trial,
                    faults=item.faults,
                    record_crash=True,
                    user=by_profile.get(item.profile),
                )
            except InfrastructureError as exc:
                result = exc
            if item.mirrors is not None and isinstance(result, Trajectory):  # the pairing reads it back
                result.user_mirror_trial = item.mirrors
            await queue.put((item, result))

    async def write() -> None:
        done = False
        while not done:
            first = await queue.get()
            batch = [] if first is None else [first]
            done = first is None
            while not queue.empty():  # whatever else is ready goes in the same transaction
                nxt = queue.get_nowait()
                if nxt is None:
                    done = True
                else:
                    batch.append(nxt)
            if batch:
                await asyncio.to_thread(writer.store, batch)
                if listener is not None:
                    listener(summary)

    writer_task = asyncio.create_task(write())
    workers = [asyncio.create_task(work()) for _ in range(width)]
    group = asyncio.gather(*workers)
    try:
        # a writer that fails stops the workers at once: no model calls whose results nobody stores
        watched: set[asyncio.Future[Any]] = {group, writer_task}
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        if writer_task.done():
            writer_task.result()
        group.result()
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if not group.done():
            group.cancel()
        try:
            if not writer_task.done():
                await queue.put(None)  # the writer stores what is queued, then stops
                await asyncio.shield(writer_task)
            summary.ended = time.monotonic()
        finally:
            for one in by_profile.values():
                close_user = getattr(one, "aclose", None)
                if close_user is not None and inspect.iscoroutinefunction(close_user):
                    closers.setdefault(id(one), close_user)
            await asyncio.gather(*(close() for close in closers.values()), return_exceptions=True)
    return summary
