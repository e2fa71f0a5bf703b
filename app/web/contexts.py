"""Typed page contexts, built in Python; the templates only display them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from app.core.outcome import OUTCOMES, REACTIONS
from app.core.report import FAMILIES
from app.store import compare as comparing
from app.store import lint as linting
from app.store import queries
from app.store.fix import run_pair_proposals
from app.store.views import (
    CallPublic,
    ComparisonPublic,
    ConfusionPublic,
    FiguresPublic,
    RunPublic,
    RunsPublic,
    ToolsetDiffPublic,
    ToolsetPublic,
    TrajectoriesPublic,
    TrajectoryPairPublic,
    TrajectoryPublic,
    TurnFigures,
)
from app.web import figures
from app.web.figures import Heatmap
from app.web.why import Segment, why

FAILURE_NAMES = ("selection", "arguments", "schema", "hallucinated_tool", "dependency", "forbidden_call", "state",
                 "recovery_hallucinated", "recovery_confused", "step_not_done")

FAMILY_CARDS = (
    ("F1 selection", (("selection_precision", "precision"), ("selection_recall", "recall")), None),
    ("F2 arguments", (("schema_validity", "schema validity"), ("argument_accuracy", "argument accuracy")), None),
    ("F3 hallucinated tools", (("hallucinated_tools", "calls to unknown tools"),), "must be 0"),
    ("F4 recovery", (("recovery", "recovered after a tool error"),
                     ("hallucination_after_error", "invented data after an error")), "hallucination must be 0"),
)


TURN_COLUMNS = (("selection_precision", "selection precision"), ("selection_recall", "selection recall"),
                ("schema_validity", "schema validity"), ("argument_accuracy", "argument accuracy"),
                ("hallucinated_tools", "hallucinated tools"), ("recovery", "recovery"),
                ("hallucination_after_error", "invented after an error"))


def blocking(run: RunPublic) -> list[str]:
    """The zero-threshold families that are not zero."""
    out = []
    if run.families["hallucinated_tools"].num:
        out.append("hallucinated tools")
    if run.families["hallucination_after_error"].num:
        out.append("hallucination after error")
    return out


@dataclass
class RunsPage:
    runs: RunsPublic
    blocking: dict[int, list[str]]
    filters: dict[str, str]
    families: tuple[str, ...] = FAMILIES

    def page_url(self, offset: int) -> str:
        """This page's URL at another offset, filters kept."""
        params = {k: v for k, v in self.filters.items() if v}
        return "?" + urlencode({**params, "offset": max(offset, 0), "limit": self.runs.limit})


def runs_page(session: Session, *, suite: str | None, model: str | None, toolset_version: str | None,
              limit: int, offset: int) -> RunsPage:
    runs = queries.list_runs(session, suite=suite, model=model, toolset_version=toolset_version, limit=limit,
                             offset=offset)
    return RunsPage(runs=runs, blocking={r.id: blocking(r) for r in runs.data},
                    filters={"suite": suite or "", "model": model or "", "toolset_version": toolset_version or ""})


# What made a faulted call fail (ERROR_SOURCES), as the run page's recovery section says it.
SOURCE_WORDS = (("injected", "an injected fault"), ("tool", "the tool's own error"),
                ("schema", "refused by the schema"), ("unknown_tool", "an unknown tool"))

@dataclass
class Cause:
    """One answer to "why did my agent fail?": failed trajectories counted
    once, under their first divergence; the link lists exactly those."""

    count: int
    text: str  # follows "N failed trajectories: "
    href: str
    why: str = ""

    @property
    def sentence(self) -> str:
        return f"{self.count} failed {_trajectories(self.count)}: {self.text}" + (f" — {self.why}" if self.why else "")


def _trajectories(n: int) -> str:
    return "trajectory" if n == 1 else "trajectories"


def causes(figs: dict[str, Any], lint: linting.RunLintPublic | None, top: int = 5) -> list[Cause]:
    """The few largest causes of failure (``causes`` of the figures: a grouped
    count kept as the trajectories were stored); a wrong tool says which lint
    finding explains the confusion, if one does."""
    findings = {(p.a, p.b): p.findings for p in lint.pairs} if lint is not None else {}
    out = []
    for c in figs.get("causes", [])[:top]:
        why = ""
        if c.get("kind") == "wrong_tool":
            pair = findings.get((c["tool"], c["other"])) or findings.get((c["other"], c["tool"]))
            if pair:
                why = "; ".join(dict.fromkeys(f.message for f in pair[:2]))
            elif pair is not None:
                why = "no lint finding explains it: read both descriptions as the model would"
        out.append(Cause(c["count"], c["text"], "?" + urlencode(c["filter"]) + "#trajectories", why))
    return out


@dataclass
class PassFigures:
    """The run's pass rate, and pass^k for k = 1..trials with the points of
    its small curve (x, y in a 100 × 30 box)."""

    passed: int
    total: int
    hat_k: list[tuple[int, float]]

    @property
    def curve(self) -> str:
        if len(self.hat_k) < 2:
            return ""
        last = self.hat_k[-1][0] - 1
        return " ".join(f"{100 * (k - 1) / last:.1f},{30 - 28 * v:.1f}" for k, v in self.hat_k)


@dataclass
class RunPage:
    run: RunPublic
    figures: FiguresPublic
    confusion: ConfusionPublic
    heatmap: Heatmap
    outcomes_by_kind: dict[str, Any] | None
    outcomes_by_step: dict[str, Any] | None
    reactions: dict[str, dict[str, tuple[int, bool]]]
    reaction_kinds: list[str]
    trajectories: TrajectoriesPublic
    filters: dict[str, str]
    blocking: list[str]
    lint: linting.RunLintPublic | None = None  # findings beside the confusion cells of each pair
    causes: list[Cause] = field(default_factory=list)
    passes: PassFigures | None = None
    turns: list[TurnFigures] = field(default_factory=list)  # per user turn, when the run holds conversations
    rewrites: dict[tuple[str, str], PairRewrite] = field(default_factory=dict)  # `toollens fix` per lint pair
    turn_columns: tuple[tuple[str, str], ...] = TURN_COLUMNS
    cards: tuple[Any, ...] = FAMILY_CARDS
    failure_names: tuple[str, ...] = FAILURE_NAMES

    def page_url(self, offset: int) -> str:
        """The trajectory list at another offset, filters and page size kept."""
        query = urlencode({**self.filters, "offset": max(offset, 0), "limit": self.trajectories.limit})
        return f"?{query}#trajectories"
    outcome_names: tuple[str, ...] = OUTCOMES
    reaction_names: tuple[str, ...] = REACTIONS
    source_words: tuple[tuple[str, str], ...] = SOURCE_WORDS


@dataclass
class PairRewrite:
    """What ``toollens fix`` proposes for a confused pair's descriptions: each
    edit as a word diff, and the command that writes and verifies them."""

    edits: list[tuple[str, str, list[tuple[str, str]]]]  # (tool, pattern, word-diff segments)
    command: str


def pair_rewrites(run_name: str, proposals: list[Any]) -> dict[tuple[str, str], PairRewrite]:
    """The description edits of each pair of tools, keyed by the sorted pair,
    with the command that writes and verifies exactly those."""
    import shlex

    from app.core.textdiff import word_diff

    by_pair: dict[tuple[str, str], list[Any]] = {}
    for p in proposals:
        if p.pattern in ("negative_delimitation", "distinct_names") and p.tool and p.partner:
            by_pair.setdefault((min(p.tool, p.partner), max(p.tool, p.partner)), []).append(p)
    return {(a, b): PairRewrite(
        edits=[(p.tool, p.pattern.replace("_", " "), [(s.op, s.text) for s in word_diff(p.before, p.after)])
               for p in ps],
        command=f"toollens fix {shlex.quote(run_name)} --pair {shlex.quote(f'{a},{b}')} --out candidate.yaml --verify")
        for (a, b), ps in by_pair.items()}


def run_page(session: Session, run_id: int, *, filters: dict[str, str], limit: int, offset: int,
             cache: Any = None) -> RunPage:
    run = queries.get_run(session, run_id)
    figs = (cache.figures(session, run_id, cases_limit=1) if cache is not None
            else queries.figures(session, run_id, cases_limit=1))
    confusion = queries.confusion(session, run_id)
    passed = {"true": True, "false": False}.get(filters.get("passed", ""))
    trajs = queries.list_trajectories(
        session, run_id, failure=filters.get("failure") or None, expected=filters.get("expected") or None,
        called=filters.get("called") or None, fault_kind=filters.get("fault_kind") or None,
        outcome=filters.get("outcome") or None, passed=passed, cause=filters.get("cause") or None, limit=limit,
        offset=offset)
    reactions: dict[str, dict[str, tuple[int, bool]]] = {}
    pair_edits = run_pair_proposals(session, run_id)[1]  # `toollens fix`'s edits of each confused pair
    lint = linting.run_lint(session, run_id)
    passed_n = queries.list_trajectories(session, run_id, passed=True, limit=1).count
    passes = PassFigures(passed_n, figs["trajectories"] + figs.get("trajectories_behind", 0),  # the live count
                         sorted((int(k), v) for k, v in figs["pass_hat_k"].items()))
    for r in figs["reactions"]:
        cell = reactions.setdefault(r["error_kind"], {})
        n, ok = cell.get(r["reaction"], (0, True))
        cell[r["reaction"]] = (n + r["count"], ok and r["acceptable"])
    return RunPage(
        run=run, figures=FiguresPublic.model_validate(figs), confusion=confusion,
        heatmap=figures.confusion_heatmap(confusion),
        outcomes_by_kind=figures.outcome_bars(figs["outcomes_by_fault_kind"], "kind", "by fault kind")
        if figs["outcomes_by_fault_kind"] else None,
        outcomes_by_step=figures.outcome_bars([{**g, "step": f"call #{int(g['step']) + 1}"}
                                               for g in figs["outcomes_by_step"]], "step", "by faulted call")
        if figs["outcomes_by_step"] else None,
        reactions=reactions, reaction_kinds=sorted(reactions), trajectories=trajs, filters=filters,
        blocking=blocking(run), lint=lint, causes=causes(figs, lint), passes=passes,
        turns=queries.turn_list(figs.get("turns")),
        rewrites=pair_rewrites(run.name, pair_edits),
    )


# What a reaction's name alone does not say, on the timeline.
REACTION_WORDS = {"ignored_error": ": went on as if the call had worked"}


@dataclass
class TimelineRow:
    """One line of the timeline: an expected step and/or an executed call."""

    expected: dict[str, Any] | None
    step: int | None
    call: CallPublic | None
    status: list[tuple[str, str]] = field(default_factory=list)  # (css class, words)
    again: bool = False  # the expected step is shown on an earlier row (this call retries it)
    latency_share: float | None = None  # the call's latency over the trajectory's slowest call (the bar's length)


def _call_status(call: CallPublic) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if call.error and call.error.get("injected"):
        out.append(("injected", f"injected {call.error['kind']}"))
    elif call.error:
        out.append(("error", f"error {call.error['kind']}"))
    if not call.exists:
        out.append(("bad", "hallucinated tool"))
    if call.schema_error:
        out.append(("bad", f"schema error in {call.schema_error['field'] or 'arguments'}"))
    if call.selection_ok is False:
        out.append(("bad", "wrong tool" if call.expected_name else "extra call"))
    if call.mismatches:
        out.append(("bad", "argument mismatch: " + ", ".join(m["field"] for m in call.mismatches)))
    if call.dependency_violation:
        out.append(("bad", f"dependency: {call.dependency_violation[0]} must come before"))
    if call.forbidden:
        out.append(("bad", "forbidden call"))
    if call.reaction:
        # neutral when acceptable: whether the answer was honest is the outcome's to say
        ok = call.reaction["acceptable"]
        words = f"then: {call.reaction['reaction']}" + REACTION_WORDS.get(call.reaction["reaction"], "") + (
            "" if ok else " (not acceptable)")
        out.append(("muted" if ok else "bad", words))
    if not out:
        out.append(("ok", "ok"))
    return out


def timeline(t: TrajectoryPublic) -> list[TimelineRow]:
    """Expected steps and executed calls side by side, in call order, each
    expected step once: a missing step sits where it was expected, or, when
    a call was aligned to it (a wrong tool), is marked on that call's row."""
    expected = t.expected_calls or []
    missing = [j for j in t.detail.get("missing_steps", []) if j < len(expected)]
    excused = set(t.detail.get("excused_steps", []))
    beside: dict[int, TimelineRow] = {}  # expected step -> the first row that shows it beside a call
    shown: set[int] = set()
    rows: list[TimelineRow] = []
    for call in t.calls:
        for j in [m for m in missing if call.step is not None and m < call.step and m not in shown]:
            if j not in {c.step for c in t.calls}:
                rows.append(TimelineRow(expected=expected[j], step=j, call=None, status=[("bad", "missing step")]))
                shown.add(j)
        exp = expected[call.step] if call.step is not None and call.step < len(expected) else None
        again = call.step in beside
        row = TimelineRow(expected=None if again else exp, step=call.step, call=call, status=_call_status(call),
                          again=again)
        if exp is not None and call.step is not None:
            beside.setdefault(call.step, row)
        rows.append(row)
    for j in missing:
        if j in shown:
            continue
        words = "not attempted (excused: gave up)" if j in excused else "missing step"
        if j in beside:  # shown beside the wrong call already: say it was never done, once
            beside[j].status.append(("muted" if j in excused else "bad", f"expected step #{j + 1} never done"))
        else:
            rows.append(TimelineRow(expected=expected[j], step=j, call=None,
                                    status=[("muted" if j in excused else "bad", words)]))
    for j in t.detail.get("undone_steps", []):  # taken on the right tool, but no call of it succeeded
        if j in beside:
            beside[j].status.append(("bad", f"expected step #{j + 1} never done: no call of it succeeded"))
    slowest = max((c.latency_ms for c in t.calls if c.latency_ms is not None), default=None)
    for row in rows:
        if row.call is not None and row.call.latency_ms is not None and slowest:
            row.latency_share = round(row.call.latency_ms / slowest, 4)
    return rows


@dataclass
class TurnGroup:
    """One user turn of a conversation on the timeline: what the user said,
    then the calls (and expected steps) that answer it."""

    turn: int
    user: str
    rows: list[TimelineRow]
    failures: list[str]
    agent: list[str] = field(default_factory=list)  # what the agent said in this turn, in order


def _row_turn(row: TimelineRow, expected: list[dict[str, Any]]) -> int:
    if row.call is not None and row.call.turn is not None:
        return row.call.turn
    if row.step is not None and row.step < len(expected):
        return int(expected[row.step].get("turn") or 1)
    return 1


def turn_groups(t: TrajectoryPublic, rows: list[TimelineRow]) -> list[TurnGroup] | None:
    """The timeline grouped by user turn (None: not a conversation)."""
    turns = t.detail.get("turns")
    if not isinstance(turns, list) or not turns:
        return None
    expected = t.expected_calls or []
    groups = [TurnGroup(int(x.get("turn", i + 1)), str(x.get("user", "")), [], list(x.get("failures") or []))
              for i, x in enumerate(turns) if isinstance(x, dict)]
    by_turn = {g.turn: g for g in groups}
    def group(turn: int) -> TurnGroup:
        found = by_turn.get(turn)
        if found is None:
            found = by_turn[turn] = TurnGroup(turn, "", [], [])
            groups.append(found)
        return found

    for row in rows:
        group(_row_turn(row, expected)).rows.append(row)
    turn = 0
    for m in t.detail.get("messages") or ():  # in order: a user message opens the next turn
        if not isinstance(m, dict):
            continue
        if m.get("role") == "user":
            turn += 1
        elif m.get("role") == "assistant" and str(m.get("content", "")).strip():
            group(max(turn, 1)).agent.append(str(m["content"]))
    return sorted(groups, key=lambda g: g.turn)


@dataclass
class TrajectoryPage:
    t: TrajectoryPublic
    run: RunPublic
    rows: list[TimelineRow]
    evidence: dict[str, Any]
    previous_failing: int | None = None
    next_failing: int | None = None
    groups: list[TurnGroup] | None = None  # a conversation's rows by user turn
    why: list[list[Segment]] = field(default_factory=list)  # the first divergence and the outcome, in words

    @property
    def user_errors(self) -> list[dict[str, str]]:
        """The simulated user's faults recorded on this conversation."""
        found = self.t.detail.get("user_error")
        return [u for u in found if isinstance(u, dict)] if isinstance(found, list) else []

    @property
    def state_declared(self) -> bool:
        """The case declares an expected final state (the scorer then
        records the state it got, or why it has none)."""
        d = self.t.detail
        return d.get("final_state") is not None or bool(d.get("state_mismatches"))


def trajectory_page(session: Session, trajectory_id: int) -> TrajectoryPage:
    t = queries.get_trajectory(session, trajectory_id)
    before, after = queries.failing_neighbours(session, t.run_id, t.id)
    rows = timeline(t)
    return TrajectoryPage(t=t, run=queries.get_run(session, t.run_id), rows=rows,
                          evidence=t.detail.get("outcome_evidence") or {}, previous_failing=before,
                          next_failing=after, groups=turn_groups(t, rows), why=why(t))


ZERO_THRESHOLD = ("hallucinated_tools", "hallucination_after_error")


@dataclass
class ComparePage:
    c: ComparisonPublic
    difference: dict[str, Any]
    blocking: set[str]  # zero-threshold families above zero in B: blocking, whatever the interval says
    turn_columns: tuple[tuple[str, str], ...] = TURN_COLUMNS


def compare_page(session: Session, a: int, b: int, cache: Any = None) -> ComparePage:
    c = cache.get(session, a, b) if cache is not None else comparing.compare_runs(session, a, b)
    return ComparePage(c=c, difference=figures.confusion_difference(c.confusion_diff),
                       blocking={d.family for d in c.families if d.family in ZERO_THRESHOLD and d.b.num})


def pair_page(session: Session, a: int, b: int) -> TrajectoryPairPublic:
    return comparing.compare_trajectories(session, a, b)


@dataclass
class ToolsetPage:
    toolset: ToolsetPublic
    diff: ToolsetDiffPublic | None
    changes: list[Any]
    runs_a: RunsPublic | None
    runs_b: RunsPublic | None
    a: str
    b: str
    detail: linting.VersionsDiffPublic | None = None  # per tool: description, schema, findings, figures
    lint: linting.LintPublic | None = None  # the only version's findings


def toolset_page(session: Session, name: str, a: str | None, b: str | None) -> ToolsetPage:
    ts = queries.get_toolset(session, name)
    versions = ts.versions
    if len(versions) < 2 and a is None and b is None:
        return ToolsetPage(ts, None, [], None, None, "", "", lint=linting.version_lint(session, name,
                                                                                       versions[-1].hash))
    a = a or versions[max(len(versions) - 2, 0)].hash
    b = b or versions[-1].hash
    diff = queries.diff_toolset(session, name, a, b)
    va = next(v for v in versions if v.hash == diff.a)
    vb = next(v for v in versions if v.hash == diff.b)
    changes = comparing.description_changes(va.tools, vb.tools)
    return ToolsetPage(ts, diff, changes, queries.list_runs(session, toolset_version=va.hash, limit=20),
                       queries.list_runs(session, toolset_version=vb.hash, limit=20), diff.a, diff.b,
                       detail=linting.diff_versions(session, name, diff.a, diff.b))
