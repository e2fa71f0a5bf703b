"""Typed read models the store returns and the API serves (``XPublic`` and
``XsPublic(data, count)`` families)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RatioPublic(BaseModel):
    """A figure: its numerator and denominator (``no_reference: true`` added when it needs
    expected calls and no trajectory had any)."""

    model_config = ConfigDict(extra="allow")

    num: int
    den: int


class PassTotals(BaseModel):
    """A run's pass figures over every simulated-user profile's conversations (``all_profiles``)."""

    scored: int = 0
    passed: int = 0
    max_trials: int = 0
    pass_hat_k: dict[str, float] = Field(default_factory=dict)


class RunPublic(BaseModel):
    id: int
    name: str
    agent: str
    model: str
    suite: str
    suite_id: int
    suite_hash: str = ""  # the content hash of the suite version the run used
    suite_version: int = 1
    toolset: str
    toolset_version: str
    toolset_label: str
    status: str
    config: dict[str, Any]
    created_at: dt.datetime
    finished_at: dt.datetime | None
    trajectories: int = 0
    families: dict[str, RatioPublic] = Field(default_factory=dict)
    dependency_violations: int = 0
    dependency_checks: int = 0  # order pairs checked: the denominator of the violations
    total_tokens: int | None = None  # tokens the run's model requests reported (None: none reported)
    cost_usd: float | None = None  # priced when read, the requests with a price (None: none had one)
    scored: int = 0  # trajectories the pass rate counts (the simulated user's broken ones left out)
    passed: int = 0  # of them, those that passed: the pass rate is passed / scored
    max_trials: int = 0  # the most trials of one case: pass^k is shown when it is above 1
    pass_hat_k: dict[str, float] = Field(default_factory=dict)  # k -> pass^k, as the report's
    # a run with simulated-user profiles: scored, passed, max_trials and pass_hat_k above count its
    # cooperative conversations (a case under another profile is the cooperation gap's); these count
    # every conversation. Absent (not null) from the JSON of a run without profiles.
    all_profiles: PassTotals | None = Field(default=None, exclude_if=lambda v: v is None)
    # the headline (scored, passed, pass^k) counts the cooperative user's conversations only: the run has
    # some under no or the cooperative profile and some under another (``report.cooperative_only``); a run
    # whose conversations all ran under non-cooperative profiles counts them all, as a run without profiles
    cooperative_only: bool = Field(default=False, exclude=True)

    @property
    def profiled(self) -> bool:
        """Some trajectory ran under a non-cooperative simulated-user profile."""
        return self.all_profiles is not None


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int
    limit: int
    offset: int


class ConfusionCell(BaseModel):
    expected: str
    called: str
    count: int
    hallucinated: bool = False


class ConfusionPublic(BaseModel):
    run_id: int
    expected: list[str]
    called: list[str]
    cells: list[ConfusionCell]


@dataclass(frozen=True)
class FaultView:
    """A trajectory's ``fault`` as the pages read it (the API serves the dict as stored)."""

    kind: str | None
    step: int | None
    injected: bool
    source: str | None

    @classmethod
    def of(cls, fault: dict[str, Any]) -> FaultView:
        return cls(fault.get("kind"), fault.get("step"), bool(fault.get("injected")), fault.get("source"))


@dataclass(frozen=True)
class ModelCallView:
    """One request to the model as the trajectory page lists it (``model``: "—" when not recorded)."""

    model: Any
    input_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    latency_ms: float | None

    @classmethod
    def of(cls, m: dict[str, Any]) -> ModelCallView:
        return cls(
            m.get("model", "—"),
            m.get("input_tokens"),
            m.get("cached_tokens"),
            m.get("output_tokens"),
            m.get("total_tokens"),
            m.get("latency_ms"),
        )


@dataclass(frozen=True)
class CallErrorView:
    """A call's ``error`` as the pages read it (the API serves the dict)."""

    kind: str | None
    message: str | None
    injected: bool
    delay_ms: float | None  # an injected delay before the fault answered

    @classmethod
    def of(cls, error: dict[str, Any]) -> CallErrorView:
        return cls(error.get("kind"), error.get("message"), bool(error.get("injected")), error.get("delay_ms"))


@dataclass(frozen=True)
class SchemaErrorView:
    """A call's ``schema_error``: the field its arguments broke and the validator's message."""

    field: str | None
    message: str | None

    @classmethod
    def of(cls, error: dict[str, str]) -> SchemaErrorView:
        return cls(error.get("field"), error.get("message"))


@dataclass(frozen=True)
class MismatchView:
    """One argument the call got wrong: the field, the rule it was compared by, both values."""

    field: Any
    rule: Any
    expected: Any
    got: Any

    @classmethod
    def of(cls, m: dict[str, Any]) -> MismatchView:
        return cls(m.get("field"), m.get("rule"), m.get("expected"), m.get("got"))


@dataclass(frozen=True)
class UsageView:
    """A trajectory's ``usage`` (``usage.trajectory_usage``) as its page's usage line reads it."""

    requests: int
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    total_tokens: int | None
    cost_usd: float | None
    priced: bool
    model_latency_ms: float | None

    @classmethod
    def of(cls, u: dict[str, Any]) -> UsageView:
        return cls(
            u.get("requests", 0),
            u.get("input_tokens"),
            u.get("output_tokens"),
            u.get("cached_tokens"),
            u.get("total_tokens"),
            u.get("cost_usd"),
            bool(u.get("priced")),
            u.get("model_latency_ms"),
        )


@dataclass(frozen=True)
class SegmentView:
    """One piece of a word diff: ``op`` (equal, delete, insert) and its text."""

    op: str | None
    text: str | None

    @classmethod
    def all(cls, segments: list[dict[str, str]]) -> list[SegmentView]:
        return [cls(s.get("op"), s.get("text")) for s in segments]


@dataclass(frozen=True)
class SchemaChangeView:
    """One change of a tool's parameter schema: its path, the operation, the value on each side."""

    path: str | None
    op: str | None
    a: str | None
    b: str | None

    @classmethod
    def all(cls, changes: list[dict[str, str | None]]) -> list[SchemaChangeView]:
        return [cls(c.get("path"), c.get("op"), c.get("a"), c.get("b")) for c in changes]


@dataclass(frozen=True)
class SchemaErrorCount:
    """How many calls broke one tool field's schema (a run's figures)."""

    tool: Any
    field: Any
    count: Any


class TrajectorySummary(BaseModel):
    id: int
    run_id: int
    case_id: str
    trial: int
    fault: dict[str, Any] | None
    outcome: str | None
    passed: bool
    failures: list[str]
    n_calls: int
    reward: float | None = None
    total_tokens: int | None = None  # what its model requests reported (None: nothing)
    agent_error: dict[str, Any] | None = None  # what the agent raised: {type, message, traceback} (last frames)
    blame: str | None = None  # a failed conversation's: agent, user or task (app/core/score/blame.py)
    blame_confidence: float | None = None
    user_profile: str | None = None  # the simulated user's profile, when one played (app/core/reports/profiles.py)

    @property
    def fault_view(self) -> FaultView | None:
        """``fault`` typed, for the pages (a property: the JSON is the fields')."""
        return FaultView.of(self.fault) if self.fault else None


class TrajectoriesPublic(BaseModel):
    data: list[TrajectorySummary]
    count: int
    limit: int
    offset: int


class CallPublic(BaseModel):
    index: int
    name: str
    arguments: Any
    observation: str | None
    error: dict[str, Any] | None
    exists: bool
    schema_error: dict[str, str] | None
    step: int | None
    expected_name: str | None
    selection_ok: bool | None
    mismatches: list[dict[str, Any]] | None
    dependency_violation: list[str] | None
    forbidden: bool
    reaction: dict[str, Any] | None
    turn: int | None = None  # the user turn it answers, in a conversation
    latency_ms: float | None = None  # the tool's wall time, an injected delay included

    # typed, for the pages (properties: the JSON is the fields')
    @property
    def error_view(self) -> CallErrorView | None:
        return CallErrorView.of(self.error) if self.error else None

    @property
    def schema_error_view(self) -> SchemaErrorView | None:
        return SchemaErrorView.of(self.schema_error) if self.schema_error else None

    @property
    def mismatch_rows(self) -> list[MismatchView]:
        return [MismatchView.of(m) for m in self.mismatches or []]


class TrajectoryPublic(TrajectorySummary):
    question: str
    answer: str
    state: dict[str, Any] | None
    detail: dict[str, Any]
    calls: list[CallPublic]
    expected_calls: list[dict[str, Any]] | None = None
    model_calls: list[dict[str, Any]] | None = None  # the requests to the model, as recorded
    usage: dict[str, Any] | None = None  # their sums and cost (``usage.trajectory_usage``), None without any

    @property
    def model_call_rows(self) -> list[ModelCallView]:
        """``model_calls`` typed, for the page (a property: the JSON is the fields')."""
        return [ModelCallView.of(m) for m in self.model_calls or []]

    @property
    def usage_view(self) -> UsageView | None:
        """``usage`` typed, for the page's usage line."""
        return UsageView.of(self.usage) if self.usage else None


class FamilyDelta(BaseModel):
    family: str
    a: RatioPublic
    b: RatioPublic
    delta: float | None
    a_ci: list[float] | None = None  # 95% Wilson interval
    b_ci: list[float] | None = None
    delta_ci: list[float] | None = None  # 95% Newcombe interval of B - A
    reads_as: str = "n/a"  # "better", "worse" or "within noise" (the interval holds 0)


class FlippedCase(BaseModel):
    case_id: str
    trial: int
    fault: str
    a_trajectory: int
    b_trajectory: int
    a_passed: bool
    b_passed: bool


class McNemarPublic(BaseModel):
    passed_only_a: int
    passed_only_b: int
    p_value: float


class ConfusionDelta(BaseModel):
    expected: str
    called: str
    a: int
    b: int
    delta: int


class ToolFigures(BaseModel):
    tool: str
    a_precision: RatioPublic
    a_recall: RatioPublic
    b_precision: RatioPublic
    b_recall: RatioPublic


class DescriptionChange(BaseModel):
    name: str
    change: str
    description_a: str
    description_b: str
    parameters_changed: bool
    segments: list[dict[str, str]]
    cells: list[ConfusionDelta] = Field(default_factory=list)  # the tool's confusion cells that moved, A to B

    @property
    def segment_views(self) -> list[SegmentView]:
        """``segments`` typed, for the page (a property: the JSON is the fields')."""
        return SegmentView.all(self.segments)


class TurnFigures(BaseModel):
    """One user turn of a run's conversations: the families within it and
    how many conversations had a failure there."""

    turn: int
    trajectories: int
    failed: int
    families: dict[str, RatioPublic]
    failures: dict[str, int]


class TurnDelta(BaseModel):
    turn: int
    a: TurnFigures | None
    b: TurnFigures | None


class UsageDelta(BaseModel):
    key: str
    label: str
    unit: str  # "tokens", "usd" or "ms"
    a: float | None
    b: float | None
    delta: float | None
    relative: float | None


class ComparisonPublic(BaseModel):
    a: RunPublic
    b: RunPublic
    families: list[FamilyDelta]
    shared_cases: int
    flipped: list[FlippedCase]
    flipped_count: int
    mcnemar: McNemarPublic | None = None
    confusion_diff: list[ConfusionDelta] = Field(default_factory=list)
    tools: list[ToolFigures] = Field(default_factory=list)
    description_changes: list[DescriptionChange] = Field(default_factory=list)
    turns: list[TurnDelta] = Field(default_factory=list)  # per user turn, when either run holds conversations
    usage: list[UsageDelta] = Field(default_factory=list)  # cost and latency, B against A (absent: no data)
    simulator_note: str | None = None  # too many flipped failures blamed on the simulated user: no verdict
    flipped_blamed_on_user: int = 0  # of the listed flipped cases, failing sides blamed on the simulated user
    simulator_checked: int | None = None  # the flipped cases that share is of (those under a user profile left out)
    cooperation: dict[str, Any] | None = None  # pass^k by simulated-user profile, both runs (app/store/profiles.py)


class ToolsetVersionPublic(BaseModel):
    id: int
    toolset: str
    hash: str
    label: str
    created_at: dt.datetime
    tools: list[dict[str, Any]]
    runs: int = 0


class ToolsetPublic(BaseModel):
    name: str
    versions: list[ToolsetVersionPublic]


class ToolChange(BaseModel):
    name: str
    change: str  # added | removed | changed | same
    description_a: str | None
    description_b: str | None
    parameters_changed: bool


class ToolsetDiffPublic(BaseModel):
    toolset: str
    a: str
    b: str
    tools: list[ToolChange]


class IngestResult(BaseModel):
    run_id: int
    stored: int
    calls: int
    trajectories_total: int


class DependencyPairPublic(BaseModel):
    before: str
    after: str
    count: int
    checked: int


class CaseResultPublic(BaseModel):
    # ``fault_not_reached`` when a planned fault was not reached; ``failures_by_turn``, ``user_error``
    model_config = ConfigDict(extra="allow")

    case_id: str
    trial: int
    passed: bool
    failures: list[str]
    fault: dict[str, Any] | None = None
    outcome: str | None = None


class LatencyPublic(BaseModel):
    p50: float | None
    p95: float | None


@dataclass(frozen=True)
class UsageGroupView:
    """What a group of a run's trajectories cost (passed, failed, by outcome, by failure)."""

    trajectories: int | None
    trajectories_with_usage: int | None
    total_tokens: int | None
    mean_tokens: float | None
    cost_usd: float | None
    trajectories_priced: int | None
    outcome: str | None = None  # the group's outcome, in ``by_outcome``
    failure: str | None = None  # the group's failure, in ``by_failure``

    @classmethod
    def of(cls, g: dict[str, Any]) -> UsageGroupView:
        return cls(
            g.get("trajectories"),
            g.get("trajectories_with_usage"),
            g.get("total_tokens"),
            g.get("mean_tokens"),
            g.get("cost_usd"),
            g.get("trajectories_priced"),
            g.get("outcome"),
            g.get("failure"),
        )


@dataclass(frozen=True)
class ToolLatencyView:
    """One tool's calls and their latency spread (a run's figures)."""

    tool: str | None
    calls: int | None
    latency_ms: LatencyPublic


class UsagePublic(BaseModel):
    """Tokens, cost and latency of a run (docs/metrics.md); a key without data is null."""

    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None
    model_latency_ms: LatencyPublic
    tool_latency_ms: LatencyPublic
    trajectories_with_usage: int
    trajectories_priced: int = 0
    model_calls: int = 0
    unpriced_models: list[str] = Field(default_factory=list)
    prices_date: str = ""
    by_result: dict[str, dict[str, Any]] = Field(default_factory=dict)
    by_failure: list[dict[str, Any]] = Field(default_factory=list)
    by_outcome: list[dict[str, Any]] = Field(default_factory=list)
    by_tool: list[dict[str, Any]] = Field(default_factory=list)

    # typed, for the run page (properties: the JSON is the fields')
    @property
    def passed_group(self) -> UsageGroupView:
        return UsageGroupView.of(self.by_result.get("passed", {}))

    @property
    def failed_group(self) -> UsageGroupView:
        return UsageGroupView.of(self.by_result.get("failed", {}))

    @property
    def outcome_groups(self) -> list[UsageGroupView]:
        return [UsageGroupView.of(g) for g in self.by_outcome]

    @property
    def failure_groups(self) -> list[UsageGroupView]:
        return [UsageGroupView.of(g) for g in self.by_failure]

    @property
    def tool_rows(self) -> list[ToolLatencyView]:
        return [
            ToolLatencyView(
                t.get("tool"), t.get("calls"), LatencyPublic(**t.get("latency_ms") or {"p50": None, "p95": None})
            )
            for t in self.by_tool
        ]


class CausePublic(BaseModel):
    """A cause of failure: failed trajectories counted once, under their
    first divergence; ``filter`` (``{"cause": key}``) lists exactly those."""

    model_config = ConfigDict(extra="allow")

    text: str
    count: int
    filter: dict[str, str]
    kind: str = ""
    tool: str = ""
    other: str = ""


class FiguresPublic(BaseModel):
    """Exactly the shape of ``toollens score --json`` (docs/formats.md), plus paging
    of ``cases``; ``turns`` (per turn number) is there only when the run holds conversations."""

    model_config = ConfigDict(extra="allow")

    selection_precision: RatioPublic
    selection_recall: RatioPublic
    schema_validity: RatioPublic
    argument_accuracy: RatioPublic
    hallucinated_tools: RatioPublic
    recovery: RatioPublic
    hallucination_after_error: RatioPublic
    dependency_violations: list[DependencyPairPublic]
    confusion: list[ConfusionCell]
    outcomes: dict[str, int]
    pass_hat_k: dict[str, float]
    cases: list[CaseResultPublic]
    trajectories: int
    failures: dict[str, int]
    outcomes_by_fault_kind: list[dict[str, Any]]
    outcomes_by_step: list[dict[str, Any]]
    reactions: list[dict[str, Any]]
    schema_errors: list[dict[str, Any]]  # {tool, field, count}: ``schema_error_rows`` for the pages
    faults_not_reached: int = 0
    user_errors: int = 0  # conversations the simulated user broke: listed, not scored
    agent_errors: dict[str, int] = Field(default_factory=dict)  # trajectories the agent raised in, by type
    # recovery and hallucination after error by what made the faulted call fail (ERROR_SOURCES)
    recovery_by_source: dict[str, dict[str, RatioPublic]] = Field(default_factory=dict)
    causes: list[CausePublic] = []  # failed trajectories by first divergence, largest first
    cases_total: int
    usage: UsagePublic | None = None
    # figures behind a run that is receiving traces also carry (as extra keys) ``computed_at``,
    # ``trajectories_behind`` and ``recompute_interval_s`` (app/web/state.py FiguresCache)

    @property
    def schema_error_rows(self) -> list[SchemaErrorCount]:
        """``schema_errors`` typed, for the run page (a property: the JSON is the fields')."""
        return [SchemaErrorCount(s.get("tool"), s.get("field"), s.get("count")) for s in self.schema_errors]


@dataclass(frozen=True)
class PairRowView:
    """One row of two trajectories side by side: the calls paired at it and what changed."""

    index: int
    a: CallPublic | None
    b: CallPublic | None
    changed: list[str]


class TrajectoryPairPublic(BaseModel):
    a: TrajectoryPublic
    b: TrajectoryPublic
    rows: list[dict[str, Any]]  # {index, a, b, changed}: ``row_views`` for the page
    answer_changed: bool

    @property
    def row_views(self) -> list[PairRowView]:
        """``rows`` typed, for the page (a property: the JSON is the fields')."""
        return [PairRowView(r["index"], r.get("a"), r.get("b"), r.get("changed") or []) for r in self.rows]


class LabelPublic(BaseModel):
    source: str
    label: str
    author: str
    reason: str
    created_at: dt.datetime


class LabelsPublic(BaseModel):
    """A trajectory's outcome as the classifier, a human and the judge see it."""

    trajectory_id: int
    deterministic: str | None
    labels: list[LabelPublic]


class AgreementPublic(BaseModel):
    a: str
    b: str
    n: int
    agree: int
    rate: float | None
    kappa: float | None


class InfraErrorPublic(BaseModel):
    case_id: str
    trial: int
    fault_key: str
    message: str
    created_at: dt.datetime


class RunHealthPublic(BaseModel):
    """Beside the figures: agreement of outcome raters and infrastructure errors."""

    run_id: int
    agreement: list[AgreementPublic]
    infra_errors: list[InfraErrorPublic]  # the first 200
    infra_error_count: int


class SuitePublic(BaseModel):
    """A suite version: ``hash`` is the content hash of its document."""

    id: int
    name: str
    version: int
    hash: str
    parent_id: int | None
    cases: int
    runs: int = 0
    created_at: dt.datetime


class CaseAdded(BaseModel):
    suite: SuitePublic
    case: dict[str, Any]
