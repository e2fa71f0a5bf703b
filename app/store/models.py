"""ORM models: toolsets and their versions, suites, runs, trajectories, calls
and the per-run counters the pages read directly."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timestamps stored in UTC and always read back timezone-aware (SQLite
    keeps no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSONType, list[Any]: JSONType, Any: JSONType}


class ToolsetVersion(Base):
    """One version of a toolset: the content hash of its contracts."""

    __tablename__ = "toolset_versions"
    __table_args__ = (UniqueConstraint("toolset", "hash", name="uq_toolset_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    toolset: Mapped[str] = mapped_column(String(200), index=True)
    hash: Mapped[str] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(100), default="")
    tools: Mapped[list[Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SuitePart(Base):
    """A piece of suite documents, stored once by content (sha256 of its
    canonical JSON): a suite's head (everything but its cases) or one case."""

    __tablename__ = "suite_parts"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    document: Mapped[Any] = mapped_column(JSONType)


class SuiteRow(Base):
    """A version of a suite: a self-contained document (toolset inline), by
    content hash. ``version`` counts the versions of one name (unique per
    name); ``parent_id`` is the version a curated case was added to.

    The document is kept as ``parts``: the hash of its head and of each case
    in ``suite_parts`` (read it whole with ``ingest.suite_document``), so a
    version that adds a case costs the case and a list of hashes. Rows stored
    before migration 0010 keep the whole document in ``legacy_document``."""

    __tablename__ = "suites"
    __table_args__ = (
        UniqueConstraint("name", "hash", name="uq_suite_content"),
        Index("uq_suite_version", "name", "version", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    hash: Mapped[str] = mapped_column(String(64))
    legacy_document: Mapped[dict[str, Any]] = mapped_column("document", JSONType, default=dict)
    # the columns in the order the migrations added them: a new database is made from these models
    toolset_version_id: Mapped[int] = mapped_column(ForeignKey("toolset_versions.id"))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    parent_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a suite id
    parts: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)  # {"head": h, "cases": [h...]}
    case_count: Mapped[int | None] = mapped_column(Integer, nullable=True)  # how many cases (lists read no parts)


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    agent: Mapped[str] = mapped_column(String(200), default="")
    model: Mapped[str] = mapped_column(String(200), default="", index=True)
    suite_id: Mapped[int] = mapped_column(ForeignKey("suites.id"), index=True)
    toolset_version_id: Mapped[int] = mapped_column(ForeignKey("toolset_versions.id"), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    status: Mapped[str] = mapped_column(String(20), default="running")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class RunAggregate(Base):
    """What comparing a run needs beyond its counters (``app.store.aggregates``), computed when
    the run is finished: valid while the run holds ``trajectories`` trajectories."""

    __tablename__ = "run_aggregates"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    trajectories: Mapped[int] = mapped_column(BigInteger)
    usage: Mapped[dict[str, Any]] = mapped_column(JSONType)


class RunPageKept(Base):
    """What a finished run's page shows beyond its counters' cheap reads (``app.store.aggregates``):
    its report's pass^k (``Report.to_json``, k = 1.. in order, the zeros that end it left out) and
    the rewrites of its confused pairs (``app.core.advise.fix.pair_edits``, of wording ``version``),
    computed when the run is finished: valid while the run holds ``trajectories`` trajectories."""

    __tablename__ = "run_page_kept"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    trajectories: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(Integer)
    pass_hat_k: Mapped[dict[str, Any]] = mapped_column(JSONType)  # {"k": most k, "values": up to the last not 0}
    pair_edits: Mapped[list[Any]] = mapped_column(JSONType)


class RunPairing(Base):
    """Two runs' trajectories paired by (case, trial, fault) as a comparison reads them
    (``app.store.aggregates``): kept when the later of two runs of one suite is finished, valid
    while the runs hold ``a_trajectories`` and ``b_trajectories``. ``flipped``: the first pairs
    that differ, in A's id order, as ``[case_id, trial, fault_key, a_id, b_id, a_passed, b_passed]``."""

    __tablename__ = "run_pairings"

    a_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    b_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, index=True)
    a_trajectories: Mapped[int] = mapped_column(BigInteger)
    b_trajectories: Mapped[int] = mapped_column(BigInteger)
    shared: Mapped[int] = mapped_column(BigInteger)
    only_a: Mapped[int] = mapped_column(BigInteger)
    only_b: Mapped[int] = mapped_column(BigInteger)
    flipped: Mapped[list[Any]] = mapped_column(JSONType)


class RunCounter(Base):
    """A running total of a run (see ``Report.counters``): added to
    atomically by every batch, read directly by the pages."""

    __tablename__ = "run_counters"
    __table_args__ = (UniqueConstraint("run_id", "kind", "a", "b", "c", name="uq_run_counter"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))
    a: Mapped[str] = mapped_column(Text, default="")
    b: Mapped[str] = mapped_column(Text, default="")
    c: Mapped[str] = mapped_column(Text, default="")
    value: Mapped[int] = mapped_column(BigInteger, default=0)


_MODEL_CALLS = text("model_calls IS NOT NULL")  # the partial indexes' conditions (migration 0015)
_LATENCY = text("latency_ms IS NOT NULL")


class TrajectoryRow(Base):
    __tablename__ = "trajectories"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id", "trial", "fault_key", name="uq_trajectory"),
        Index("ix_traj_run_passed", "run_id", "passed", "id"),  # a filtered page in id order, from the index
        Index("ix_traj_run_outcome", "run_id", "outcome", "id"),
        Index("ix_traj_run_key_passed", "run_id", "case_id", "trial", "fault_key", "passed", "id"),  # compare
        Index("ix_traj_run_order", "run_id", "id"),  # a run's pages in storage order, without sorting the run
        Index("ix_traj_run_recovery", "run_id", "recovery_kind", "outcome"),
        # the run's trajectories with model requests (the usage figures), none read when there are none
        Index("ix_traj_run_model_calls", "run_id", "id", sqlite_where=_MODEL_CALLS, postgresql_where=_MODEL_CALLS),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[str] = mapped_column(Text)
    trial: Mapped[int] = mapped_column(Integer, default=0)
    fault_key: Mapped[str] = mapped_column(String(100), default="")
    fault_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    fault_kind: Mapped[str | None] = mapped_column(String(40), nullable=True)
    recovery_kind: Mapped[str | None] = mapped_column(String(40), nullable=True)
    question: Mapped[str] = mapped_column(Text, default="")
    answer: Mapped[str] = mapped_column(Text, default="")
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    state: Mapped[Any] = mapped_column(JSONType, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(20), nullable=True)
    passed: Mapped[bool] = mapped_column(Boolean)
    failures: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    n_calls: Mapped[int] = mapped_column(Integer, default=0)
    # usage (app.core.usage): the model requests as recorded, and their sums (NULL: nothing reported)
    model_calls: Mapped[Any] = mapped_column(JSONType, nullable=True)
    input_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    output_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cached_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    total_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    model_latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class TrajectoryTag(Base):
    """Index rows for the filters that are not columns: ``failure`` (a failure
    name) and ``missing`` (an expected tool never attempted)."""

    __tablename__ = "trajectory_tags"
    __table_args__ = (Index("ix_tag_run_kind_value", "run_id", "kind", "value", "trajectory_id"),)

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), primary_key=True)
    value: Mapped[str] = mapped_column(Text, primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer)


class CallRow(Base):
    __tablename__ = "calls"
    __table_args__ = (
        Index("ix_calls_traj", "trajectory_id", "idx"),
        Index("ix_calls_cell", "run_id", "expected_name", "name", "trajectory_id"),
        Index("ix_calls_tool", "run_id", "name", "trajectory_id"),
        Index("ix_calls_run_order", "run_id", "id"),  # a run's first calls in id order, without sorting the run
        # the run's tool latencies (the usage figures) from the index alone, none read when there are none
        Index(
            "ix_calls_run_latency",
            "run_id",
            "trajectory_id",
            "name",
            "latency_ms",
            sqlite_where=_LATENCY,
            postgresql_where=_LATENCY,
        ),
        # the run's tool latencies in order: a percentile read at its rank (migration 0016)
        Index(
            "ix_calls_run_latency_order",
            "run_id",
            "latency_ms",
            "trajectory_id",
            sqlite_where=_LATENCY,
            postgresql_where=_LATENCY,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(Integer)
    idx: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    arguments: Mapped[Any] = mapped_column(JSONType, nullable=True)
    arguments_raw: Mapped[str | None] = mapped_column(Text, nullable=True)
    observation: Mapped[str | None] = mapped_column(Text, nullable=True)
    error_kind: Mapped[str | None] = mapped_column(String(40), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    injected: Mapped[bool] = mapped_column(Boolean, default=False)
    exists: Mapped[bool] = mapped_column(Boolean, default=True)
    schema_field: Mapped[str | None] = mapped_column(Text, nullable=True)
    schema_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    expected_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    selection_ok: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    mismatches: Mapped[Any] = mapped_column(JSONType, nullable=True)
    dependency_before: Mapped[str | None] = mapped_column(Text, nullable=True)
    forbidden: Mapped[bool] = mapped_column(Boolean, default=False)
    reaction: Mapped[str | None] = mapped_column(String(20), nullable=True)
    reaction_ok: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    turn: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the user turn, in a conversation
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    delay_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class OutcomeLabel(Base):
    """An outcome label beside the deterministic classifier's: a human's
    (from the trajectory page or the API) or the LLM judge's. One current
    label per trajectory and source; a new one replaces it."""

    __tablename__ = "outcome_labels"
    __table_args__ = (
        UniqueConstraint("trajectory_id", "source", name="uq_outcome_label"),
        Index("ix_labels_run_source", "run_id", "source"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(20))  # "human" or "judge"
    label: Mapped[str] = mapped_column(String(20))  # recovered / gave_up / hallucinated / confused
    author: Mapped[str] = mapped_column(String(200), default="")  # who labelled, or the judge's model
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class InfraError(Base):
    """A case run the model endpoint kept failing: an infrastructure error,
    not a failed case. Removed when a later attempt (``--resume``) stores it."""

    __tablename__ = "infra_errors"
    __table_args__ = (UniqueConstraint("run_id", "case_id", "trial", "fault_key", name="uq_infra_error"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[str] = mapped_column(Text)
    trial: Mapped[int] = mapped_column(Integer, default=0)
    fault_key: Mapped[str] = mapped_column(String(100), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class OtlpBatch(Base):
    """An OTLP export request the receiver answered for, some of whose traces
    are not stored yet. A trace's trajectory is written in the same
    transaction that marks it done here (``OtlpBatchDone``), and the batch is
    deleted with its last trace, so a crash loses nothing that was
    acknowledged and stores nothing twice; a restart picks up the rest."""

    __tablename__ = "otlp_batches"
    # an id is never used again (SQLite reuses the highest one otherwise): memory keys batches by it
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    format: Mapped[str] = mapped_column(String(8))  # app.otlp.spans.BATCH_PROTOBUF, BATCH_LINES or BATCH_GROUPED
    body: Mapped[bytes] = mapped_column(LargeBinary)
    # the server that stores it (``OtlpLease``); NULL: staged before leases, taken by the next server up
    lease_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)


class OtlpBatchDone(Base):
    """A trace of a staged batch that is stored (or given up on) already."""

    __tablename__ = "otlp_batch_done"

    batch_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"),
        ForeignKey("otlp_batches.id", ondelete="CASCADE"),
        primary_key=True,
    )
    trace_id: Mapped[str] = mapped_column(Text, primary_key=True)


class OtlpLease(Base):
    """A running receiver's claim on the batches it staged (app.store.otlp_lease): alive while
    its PostgreSQL advisory lock is held, or on SQLite while its heartbeat is fresh and its
    process runs. Only an expired lease's batches are taken over by another server."""

    __tablename__ = "otlp_leases"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012  # an id is never used again

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    beat: Mapped[float] = mapped_column(Float, default=0.0)  # wall-clock seconds of its last heartbeat


class OtlpTrace(Base):
    """A trace the receiver stored in a run: its span ids and how many trials of it are
    stored, written in the transaction that stores it. Spans sent again (a retried request,
    a resend after a restart, another server) are recognised here, not only in memory."""

    __tablename__ = "otlp_traces"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    trace_id: Mapped[str] = mapped_column(Text, primary_key=True)
    span_ids: Mapped[list[str]] = mapped_column(JSONType, default=list)
    flushes: Mapped[int] = mapped_column(Integer, default=1)


class LiveMessage(Base):
    """A message a harness reported to ``mcp-serve`` for a trajectory still pending
    (``app.store.live``): appended, one row each, and moved into the trajectory's record
    when it is stored, so that a message costs one insert whatever the conversation holds."""

    __tablename__ = "live_messages"
    __table_args__ = (Index("ix_live_messages_run_key", "run_id", "key"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(Text)  # the pending key, ``<session>@<server id>``
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    calls_before: Mapped[int] = mapped_column(Integer)


class LivePending(Base):
    """The record so far of a trajectory ``mcp-serve`` is recording (``app.store.live``), one row
    per session: rewritten on each of its calls, moved into the run as a stored trajectory when
    the session ends. ``case_id`` and ``trial`` are the record's, so a new session's trial is a query."""

    __tablename__ = "live_pending"
    __table_args__ = (UniqueConstraint("run_id", "key", name="uq_live_pending_run_key"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)  # save order
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(Text)  # ``<session>@<server id>``
    case_id: Mapped[str] = mapped_column(Text)
    trial: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict[str, Any]] = mapped_column(JSONType)
