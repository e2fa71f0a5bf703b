"""Runs recorded live, call by call (``toollens mcp-serve``).

A trajectory is stored whole (scored, with its counters) only when it ends.
Until then its record so far is kept in ``live_pending``, one row per
session, saved after every call in its own transaction: a client that
disconnects, or a server that dies, loses no call; the pending records are
stored by ``flush_pending`` at session end, at shutdown, or on the next start
with the same run.

Each server that records into the run registers itself under
``live_servers`` (a random id, with what tells whether its process still
runs: host, boot, PID and the process's start time); pending keys are
``<session>@<server id>``. A run stays open while a registered server runs;
the last one to stop finishes it (``finished_by: mcp-serve``), and a later
``mcp-serve`` on that run opens it again, unless ``toollens finish`` closed
it for good.

A save rewrites only its own session's row, so the cost of a call does not
grow with the other open sessions; a session holds at most ``MAX_CALLS``
calls (the server refuses more), so its record stays bounded (rewritten on
each of its calls: quadratic in its calls, bounded by ``MAX_CALLS``). The
messages a harness reports are not in that record: each is one row appended
to ``live_messages`` (``append_messages``), joined to the record when it is
stored, so a message costs one insert however long the conversation is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from app.core.records import parse_record
from app.core.score.scoring import Scorer
from app.store.aggregates import finish_run
from app.store.errors import Conflict
from app.store.ingest import add_trajectories, create_run, ensure_suite, get_run_row
from app.store.models import LiveMessage, LivePending, Run, TrajectoryRow

SERVERS = "live_servers"
FINISHED_BY = "finished_by"
AUTO_FINISH = "mcp-serve"


def open_live_run(
    session: Session,
    *,
    name: str,
    document: dict[str, Any],
    agent: str = "",
    model: str = "",
    config: dict[str, Any] | None = None,
) -> Run:
    """The open run of that name (on the same suite), or a new one."""
    suite_row = ensure_suite(session, document)
    run = session.scalar(select(Run).where(Run.name == name))
    if run is None:
        return create_run(session, name=name, suite_row=suite_row, agent=agent, model=model, config=dict(config or {}))
    if run.suite_id != suite_row.id:
        raise Conflict(f"run {name!r} was recorded against another suite (or another version of it)")
    if run.status == "finished":
        if (run.config or {}).get(FINISHED_BY) != AUTO_FINISH:
            raise Conflict(f"run {name!r} is finished: it takes no new trajectories")
        run.status, run.finished_at = "running", None  # finished only because its last server stopped
    return run


def register_server(session: Session, run_id: int, server: str, identity: dict[str, Any]) -> None:
    """Note a server recording into the run (and that the run is no longer finished by one)."""
    run = _locked(session, run_id)
    config = dict(run.config or {})
    config[SERVERS] = {**dict(config.get(SERVERS) or {}), server: identity}
    config.pop(FINISHED_BY, None)
    run.config = config


def servers(session: Session, run_id: int) -> dict[str, dict[str, Any]]:
    return dict((get_run_row(session, run_id).config or {}).get(SERVERS) or {})


def unregister_server(
    session: Session, run_id: int, server: str, last: Callable[[dict[str, dict[str, Any]]], bool] | None = None
) -> bool:
    """Drop the server from the run's list. With ``last`` (given the other
    registered servers: whether none of them still runs), finish the run when
    it says so, as its last server (a later ``mcp-serve`` may open it again).
    Decided under the run's row lock: of two servers stopping at once, the
    second sees the first gone. Returns whether the run was finished."""
    run = _locked(session, run_id)
    config = dict(run.config or {})
    others = {k: v for k, v in dict(config.get(SERVERS) or {}).items() if k != server}
    config[SERVERS] = others
    finish = last is not None and run.status != "finished" and last(others)
    if finish:
        config[FINISHED_BY] = AUTO_FINISH
        finish_run(session, run_id)
    run.config = config
    return finish


def _locked(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id, with_for_update=True)
    if run is None:
        get_run_row(session, run_id)  # raises NotFound
    assert run is not None
    return run


def pending(session: Session, run_id: int, keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The run's pending records (all, or those of ``keys``) by key, in the order their sessions started."""
    get_run_row(session, run_id)  # raises NotFound
    query = select(LivePending.key, LivePending.record).where(LivePending.run_id == run_id).order_by(LivePending.id)
    if keys is None:
        return {str(k): r for k, r in session.execute(query)}
    wanted = list(keys)
    return {
        str(k): r
        for i in range(0, len(wanted), 500)
        for k, r in session.execute(query.where(LivePending.key.in_(wanted[i : i + 500])))
    }


def is_pending(session: Session, run_id: int, key: str) -> bool:
    found = session.scalar(select(LivePending.id).where(LivePending.run_id == run_id, LivePending.key == key))
    return found is not None


def next_trial(session: Session, run_id: int, case_id: str) -> int:
    """One more than the highest trial of the case, stored or pending (the
    run row locked first, so two servers never pick the same trial)."""
    _locked(session, run_id)
    highest = [
        session.scalar(select(func.max(table.trial)).where(table.run_id == run_id, table.case_id == case_id))
        for table in (TrajectoryRow, LivePending)
    ]
    trials = [int(t) for t in highest if t is not None]
    return max(trials) + 1 if trials else 0


def save_pending(session: Session, run_id: int, key: str, record: dict[str, Any]) -> None:
    """Keep a trajectory's record so far under its session's key (only that
    row is written; the other sessions' records are not read nor rewritten)."""
    row = session.execute(select(Run.name, Run.status).where(Run.id == run_id).with_for_update()).first()
    if row is None:
        get_run_row(session, run_id)  # raises NotFound
        return
    if row.status == "finished" and not is_pending(session, run_id, key):
        raise Conflict(f"run {row.name!r} is finished: it takes no new trajectories")
    values = {"record": record, "case_id": str(record.get("case_id", "")), "trial": int(record.get("trial", 0))}
    saved = session.execute(
        update(LivePending).where(LivePending.run_id == run_id, LivePending.key == key).values(**values),
        execution_options={"synchronize_session": False},
    )
    if not getattr(saved, "rowcount", 0):  # the session's first save (one server writes a key, one call at a time)
        session.execute(insert(LivePending).values(run_id=run_id, key=key, **values))


def append_messages(session: Session, run_id: int, key: str, messages: list[dict[str, Any]]) -> None:
    """Append messages (``role``, ``content``, ``calls_before``) to a pending trajectory: one
    insert, the run's row only read (a finished run takes none for a trajectory not pending)."""
    row = session.execute(select(Run.name, Run.status).where(Run.id == run_id)).first()
    if row is None:
        get_run_row(session, run_id)  # raises NotFound
        return
    if row.status == "finished" and not is_pending(session, run_id, key):
        raise Conflict(f"run {row.name!r} is finished: it takes no new trajectories")
    session.execute(insert(LiveMessage), [{"run_id": run_id, "key": key, **m} for m in messages])


def _messages(session: Session, run_id: int, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The appended messages of these pending keys, in the order they came."""
    found: dict[str, list[dict[str, Any]]] = {}
    for i in range(0, len(keys), 500):
        rows = session.execute(
            select(LiveMessage.key, LiveMessage.role, LiveMessage.content, LiveMessage.calls_before)
            .where(LiveMessage.run_id == run_id, LiveMessage.key.in_(keys[i : i + 500]))
            .order_by(LiveMessage.id)
        )
        for key, role, content, at in rows:
            found.setdefault(str(key), []).append({"role": role, "content": content, "calls_before": int(at)})
    return found


def flush_pending(
    session: Session,
    run_id: int,
    scorer: Scorer,
    keys: Iterable[str] | None = None,
    answers: dict[str, str] | None = None,
) -> int:
    """Store the pending trajectories (all, or those keys) and drop them from
    the pending set, in the caller's transaction. Returns how many."""
    run = _locked(session, run_id)
    waiting = pending(session, run_id, keys)
    chosen = list(waiting) if keys is None else [k for k in dict.fromkeys(keys) if k in waiting]
    if not chosen:
        return 0
    records = []
    said = _messages(session, run_id, chosen)
    for k in chosen:
        rec = dict(waiting[k])
        if answers and k in answers:
            rec["answer"] = answers[k]
        if said.get(k):  # a record saved before messages had their own rows may hold some already
            rec["messages"] = [*(rec.get("messages") or []), *said[k]]
        records.append(parse_record(rec, source=f"run {run_id} pending {k}"))
    finished = run.status == "finished"  # another server finished it: what it accepted is still stored
    if finished:
        run.status = "running"
    add_trajectories(session, run=run, scorer=scorer, trajectories=records)
    if finished:
        run.status = "finished"
    for i in range(0, len(chosen), 500):
        for table in (LivePending, LiveMessage):
            session.execute(
                delete(table).where(table.run_id == run_id, table.key.in_(chosen[i : i + 500])),
                execution_options={"synchronize_session": False},
            )
    return len(records)
