"""The run page: what went wrong (causes, families, confusion and the lint
findings that explain it, recovery), its cost, and its trajectories, filtered."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.core.reports.cooperation import COOPERATIVE, GapView, gap_view
from app.core.score.blame import BLAMES
from app.core.score.families import BY_KEY, RATIO_FAMILIES, Failure, Family
from app.core.score.outcome import OUTCOMES, REACTIONS
from app.store import labels, pairs, queries
from app.store import lint as linting
from app.store.blame import BlameFigures, blame_figures
from app.store.models import Run
from app.store.profiles import run_gap
from app.store.views import (
    CausePublic,
    ConfusionPublic,
    FiguresPublic,
    RatioPublic,
    RunHealthPublic,
    RunPublic,
    TrajectoriesPublic,
    TurnFigures,
)
from app.web import figures
from app.web.deps import Limit, Offset, ReadSession, ResolvedRun, render
from app.web.figures import Figure, Heatmap
from app.web.pages.pager import Pager, pager
from app.web.pages.runs import blocking

router = APIRouter()
T = TypeVar("T")

FAILURE_NAMES = tuple(f.value for f in Failure)
TURN_COLUMNS = tuple((f.key, f.turn_label) for f in RATIO_FAMILIES)  # the per-turn tables' columns

# What made a faulted call fail (ERROR_SOURCES), as the run page's recovery section says it.
SOURCE_WORDS = (
    ("injected", "an injected fault"),
    ("tool", "the tool's own error"),
    ("schema", "refused by the schema"),
    ("unknown_tool", "an unknown tool"),
)


@dataclass(frozen=True)
class Metric:
    label: str
    ratio: RatioPublic
    blocking: bool  # a zero-threshold figure above zero


@dataclass(frozen=True)
class Card:
    """A family's card: its figures and, for the zero-threshold ones, the threshold."""

    title: str
    metrics: list[Metric]
    threshold: str | None


def _threshold(members: list[Family]) -> str | None:
    """What a card says of its zero-threshold figures: that they must be 0, or which one must."""
    blocking = [m for m in members if m.blocking]
    if not blocking:
        return None
    return "must be 0" if blocking == members else blocking[0].zero_note


def cards(f: FiguresPublic) -> list[Card]:
    """A card per family heading with a num/den figure (F1-F4; F5, order, has its own)."""
    groups: dict[str, list[Family]] = {}
    for family in RATIO_FAMILIES:
        groups.setdefault(family.heading, []).append(family)
    return [
        Card(
            heading,
            [Metric(m.card, getattr(f, m.key), m.blocking and getattr(f, m.key).num > 0) for m in members],
            _threshold(members),
        )
        for heading, members in groups.items()
    ]


@dataclass
class Cause:
    """One answer to "why did my agent fail?": failed trajectories counted
    once, under their first divergence; the link lists exactly those."""

    count: int
    text: str  # follows "N failed trajectories: "
    href: str
    why: str = ""

    @property
    def noun(self) -> str:
        return "trajectory" if self.count == 1 else "trajectories"

    @property
    def sentence(self) -> str:
        return f"{self.count} failed {self.noun}: {self.text}" + (f" — {self.why}" if self.why else "")


def causes(found: list[CausePublic], lint: linting.RunLintPublic | None, top: int = 5) -> list[Cause]:
    """The few largest causes of failure (``causes`` of the figures: a grouped
    count kept as the trajectories were stored); a wrong tool says which lint
    finding explains the confusion, if one does."""
    findings = {(p.a, p.b): p.findings for p in lint.pairs} if lint is not None else {}
    out = []
    for c in found[:top]:
        why = ""
        if c.kind == "wrong_tool":
            pair = findings.get((c.tool, c.other)) or findings.get((c.other, c.tool))
            if pair:
                why = "; ".join(dict.fromkeys(f.message for f in pair[:2]))
            elif pair is not None:
                why = "no lint finding explains it: read both descriptions as the model would"
        out.append(Cause(c.count, c.text, "?" + urlencode(c.filter) + "#trajectories", why))
    return out


@dataclass(frozen=True)
class TurnRow:
    """A row of the by-turn table: one turn, or a stretch of turns where nothing happened (``turn`` None:
    no call checked in any family and no conversation failed there), folded into one line."""

    turn: TurnFigures | None
    first: int
    last: int
    conversations: str = ""  # a folded stretch: how many conversations reached it ("3", or "3 → 1")

    @property
    def words(self) -> str:
        return f"turns {self.first}–{self.last}: nothing happened"

    @property
    def cells(self) -> list[RatioPublic | None]:
        """The turn's families in the table's columns (``TURN_COLUMNS``); none for a folded stretch."""
        return [self.turn.families.get(k) for k, _ in TURN_COLUMNS] if self.turn is not None else []


def quiet(t: TurnFigures) -> bool:
    """Nothing happened in the turn: no failure, and no family counted anything in it."""
    return not t.failed and not t.failures and not any(r.den for r in t.families.values())


def fold_turns(turns: list[TurnFigures], at_least: int = 2) -> list[TurnRow]:
    """The by-turn table's rows: each stretch of ``at_least`` or more consecutive quiet turns one row."""
    rows: list[TurnRow] = []
    stretch: list[TurnFigures] = []

    def close() -> None:
        if len(stretch) >= at_least:
            most, fewest = stretch[0].trajectories, stretch[-1].trajectories
            rows.append(
                TurnRow(None, stretch[0].turn, stretch[-1].turn, str(most) if most == fewest else f"{most} → {fewest}")
            )
        else:
            rows.extend(TurnRow(t, t.turn, t.turn) for t in stretch)
        stretch.clear()

    for t in turns:
        if quiet(t) and (not stretch or t.turn == stretch[-1].turn + 1):
            stretch.append(t)
            continue
        close()
        if quiet(t):
            stretch.append(t)
        else:
            rows.append(TurnRow(t, t.turn, t.turn))
    close()
    return rows


@dataclass
class PassFigures:
    """The run's pass rate, pass^k for k = 1..trials (at most ``MAX_K_SHOWN`` of them printed) and
    the points of its small curve (x, y in a 100 × 30 box; at most ``CURVE_POINTS``)."""

    passed: int
    total: int  # the trajectories scored: as the runs list and compare count them
    hat_k: list[tuple[int, float]]
    left_out: int = 0  # conversations the simulated user broke: not scored
    points: list[tuple[int, float]] = field(default_factory=list)  # the curve's; hat_k when empty
    others: int = 0  # a run with simulated-user profiles: the conversations scored under the other profiles

    @property
    def failed(self) -> int:
        return self.total - self.passed

    @property
    def rate(self) -> str:
        return "n/a" if not self.total else f"{100 * self.passed / self.total:.1f}%"

    @property
    def curve(self) -> str:
        points = self.points or self.hat_k
        if len(points) < 2:
            return ""
        last = points[-1][0] - 1
        return " ".join(f"{100 * (k - 1) / last:.1f},{30 - 28 * v:.1f}" for k, v in points)


MAX_K_SHOWN = 12  # pass^k values a run page prints: k = 1..12; with more trials, 1..8 and four up to the last
CURVE_POINTS = 60  # points of its curve


def pass_figures(
    passed: int, total: int, hat_k: Mapping[Any, float], left_out: int = 0, others: int = 0
) -> PassFigures:
    """A run's pass figures from its stored pass^k (``"k"`` -> value, k = 1..trials): the values and
    points picked by k, so that a run of thousands of trials per case costs what a run of a few does;
    ``others``: a profiled run's conversations under non-cooperative profiles, outside these figures."""
    top = len(hat_k)
    if top <= MAX_K_SHOWN:
        shown = list(range(1, top + 1))
    else:
        shown = sorted({*range(1, 9), *(round(top ** (i / 4)) for i in range(1, 5))} - {0})
    step = max(1, -(-(top - 1) // (CURVE_POINTS - 1)))
    curve = sorted({*range(1, top + 1, step), top}) if top > CURVE_POINTS else []

    def value(k: int) -> tuple[int, float]:  # the figures' keys are k as text (JSON), or as numbers
        v = hat_k.get(str(k))
        return k, float(hat_k[k] if v is None else v)

    return PassFigures(passed, total, [value(k) for k in shown], left_out, [value(k) for k in curve], others)


@dataclass
class PairRewrite:
    """What ``toollens fix`` proposes for a confused pair's descriptions: each
    edit as a word diff, and the command that writes and verifies them."""

    edits: list[tuple[str, str, list[tuple[str, str]]]]  # (tool, pattern, word-diff segments)
    command: str


def pair_rewrites(run_name: str, edits: pairs.PairEdits) -> dict[tuple[str, str], PairRewrite]:
    """The description edits of each pair of tools (``app.core.advise.fix.pair_edits``), keyed by
    the sorted pair, with the command that writes and verifies exactly those."""
    return {
        (a, b): PairRewrite(
            edits=[(tool, pattern.replace("_", " "), [(op, text) for op, text in diff]) for tool, pattern, diff in by],
            command=f"toollens fix {shlex.quote(run_name)} --pair {shlex.quote(f'{a},{b}')} "
            "--out candidate.yaml --verify",
        )
        for a, b, by in edits
    }


@dataclass(frozen=True)
class Behind:
    """Figures served behind a run that is receiving traces (app/web/state.py FiguresCache)."""

    computed_at: str  # ISO 8601, UTC
    trajectories: int  # stored since
    recompute_interval_s: float

    @classmethod
    def of(cls, figs: dict[str, Any]) -> Behind | None:
        """None: the figures are current."""
        if not figs.get("trajectories_behind"):
            return None
        return cls(figs["computed_at"], figs["trajectories_behind"], figs["recompute_interval_s"])


@dataclass(frozen=True)
class BlameCount:
    blame: str  # agent, user or task
    count: int  # failed conversations blamed on it


@dataclass(frozen=True)
class SourceRow:
    """One row of the recovery table: faulted calls that failed by one source."""

    words: str  # the source as the page says it
    recovery: RatioPublic
    hallucination_after_error: RatioPublic


@dataclass(frozen=True)
class ReactionCell:
    count: int
    acceptable: bool  # every one of them an acceptable reaction


@dataclass(frozen=True)
class ReactionRow:
    """One error kind's reactions, a cell per name of ``REACTIONS`` (None: none seen)."""

    kind: str
    cells: list[ReactionCell | None]


@dataclass(frozen=True)
class RunFilters:
    """The trajectory list's filters, as the form shows them ("": not set)."""

    failure: str = ""
    expected: str = ""
    called: str = ""
    fault_kind: str = ""
    outcome: str = ""
    passed: str = ""
    cause: str = ""
    blame: str = ""


HIDDEN_FILTERS = ("expected", "called", "fault_kind", "cause")  # the filters the form has no field for


@dataclass
class RunPage:
    run: RunPublic
    figures: FiguresPublic
    confusion: ConfusionPublic
    heatmap: Heatmap
    outcomes_by_kind: Figure | None
    outcomes_by_step: Figure | None
    reactions: dict[str, dict[str, tuple[int, bool]]]  # error kind -> reaction -> (count, all acceptable)
    reaction_kinds: list[str]
    trajectories: TrajectoriesPublic
    filters: dict[str, str]
    blocking: list[str]
    health: RunHealthPublic  # agreement of the outcome raters, infrastructure errors
    passes: PassFigures
    cards: list[Card]
    order_violations: int  # F5: dependency violations, all pairs
    order_checks: int  # F5's denominator: the order pairs checked (the runs list's and show's too)
    cost_per_trajectory: float | None
    pager: Pager | None
    lint: linting.RunLintPublic | None = None  # findings beside the confusion cells of each pair
    causes: list[Cause] = field(default_factory=list)
    turns: list[TurnRow] = field(default_factory=list)  # per user turn (quiet stretches folded), conversations only
    rewrites: dict[tuple[str, str], PairRewrite] = field(default_factory=dict)  # `toollens fix` per lint pair
    blame: BlameFigures | None = None  # failed conversations by who failed them (docs/blame.md)
    causes_missing: int = 0  # failed trajectories without a cause: a run that needs `toollens db backfill`
    cooperation: GapView | None = None  # pass^k by simulated-user profile against the cooperative one
    blame_names: tuple[str, ...] = BLAMES
    turn_columns: tuple[tuple[str, str], ...] = TURN_COLUMNS
    failure_names: tuple[str, ...] = FAILURE_NAMES
    order: Family = BY_KEY["dependency_violations"]  # F5, a list of pairs: its own card
    outcome_names: tuple[str, ...] = OUTCOMES
    behind: Behind | None = None  # the figures are behind the run, which is receiving traces
    reaction_names: tuple[str, ...] = REACTIONS
    source_words: tuple[tuple[str, str], ...] = SOURCE_WORDS

    @property
    def order_ratio(self) -> RatioPublic:
        """F5 as the runs list, show and gate state it: violations of the order checks (17/43)."""
        return RatioPublic(num=self.order_violations, den=self.order_checks)

    @property
    def fix_command(self) -> str:
        """The command that proposes the edits this run's failures call for (named on the first screen)."""
        return f"toollens fix {shlex.quote(self.run.name)}"

    @property
    def backfill_command(self) -> str:
        """The command that counts the causes of a run stored before they were kept."""
        return f"toollens db backfill --run {shlex.quote(self.run.name)}"

    @property
    def outcome_counts(self) -> list[tuple[str, int]]:
        """Recovery outcomes by name, in ``OUTCOMES`` order."""
        return [(name, self.figures.outcomes[name]) for name in self.outcome_names]

    @property
    def blame_counts(self) -> list[BlameCount]:
        """Failed conversations by blame, one per name of ``BLAMES``."""
        by = self.blame.by_blame if self.blame is not None else {}
        return [BlameCount(b, by.get(b, 0)) for b in self.blame_names]

    @property
    def blamed_elsewhere(self) -> int:
        """Failed conversations blamed on the simulated user or the task, of those the pass rate counts
        (a run with simulated-user profiles: its cooperative ones)."""
        if self.blame is not None and self.blame.headline_blamed_elsewhere is not None:
            return self.blame.headline_blamed_elsewhere
        by = self.blame.by_blame if self.blame is not None else {}
        return by.get("user", 0) + by.get("task", 0)

    @property
    def agent_only_scored(self) -> int:
        """The denominator of the pass rate without them."""
        return (self.blame.scored if self.blame is not None else 0) - self.blamed_elsewhere

    @property
    def recovery_sources(self) -> list[SourceRow]:
        """The recovery table's rows: the sources that failed some faulted call, in ``SOURCE_WORDS`` order."""
        by = self.figures.recovery_by_source
        return [
            SourceRow(words, r["recovery"], r["hallucination_after_error"])
            for key, words in self.source_words
            if (r := by.get(key)) and r["recovery"].den
        ]

    @property
    def reaction_rows(self) -> list[ReactionRow]:
        """The reactions table: error kinds sorted, a cell per reaction name."""
        return [
            ReactionRow(
                k,
                [None if (c := self.reactions[k].get(r)) is None else ReactionCell(*c) for r in self.reaction_names],
            )
            for k in self.reaction_kinds
        ]

    @property
    def chosen(self) -> RunFilters:
        """The filters set, typed."""
        return RunFilters(**self.filters)

    @property
    def hidden_filters(self) -> list[tuple[str, str]]:
        """The filters set that the form has no field for: (name, value), kept as hidden inputs."""
        return [(k, self.filters[k]) for k in HIDDEN_FILTERS if self.filters.get(k)]

    def rewrite(self, a: str, b: str) -> PairRewrite | None:
        """``toollens fix``'s edits of the pair (a, b), sorted as lint sorts it."""
        return self.rewrites.get((a, b))

    @property
    def rated(self) -> bool:
        """Some pair of raters labelled a trajectory both."""
        return any(a.n for a in self.health.agreement)


def run_page(
    session: Session, resolved: Run | int, *, filters: dict[str, str], limit: int, offset: int, cache: Any = None
) -> RunPage:
    """The run page's context, for a run resolved once (``deps.ResolvedRun``; an id is resolved here)."""
    if isinstance(resolved, int):
        resolved = queries.resolve_run(session, resolved)
    run_id = resolved.id
    run = queries.run_public(session, resolved)
    figs = (
        cache.figures(session, run_id, cases_limit=1)
        if cache is not None
        else queries.figures(session, run_id, cases_limit=1)
    )
    f = FiguresPublic.model_validate(figs)

    def kept(what: str, compute: Callable[[], T]) -> T:
        """What the run's rows and counters alone give, kept with its figures (computed once a batch)."""
        if cache is None:
            return compute()
        return cache.derived(run_id, resolved.created_at, run.trajectories, what, compute)  # type: ignore[no-any-return]

    confusion, heatmap = kept(
        "confusion", lambda: (c := queries.confusion(session, run_id), figures.confusion_heatmap(c))
    )
    passed = {"true": True, "false": False}.get(filters.get("passed", ""))
    trajs = queries.list_trajectories(
        session,
        run_id,
        failure=filters.get("failure") or None,
        expected=filters.get("expected") or None,
        called=filters.get("called") or None,
        fault_kind=filters.get("fault_kind") or None,
        outcome=filters.get("outcome") or None,
        passed=passed,
        cause=filters.get("cause") or None,
        blame=filters.get("blame") or None,
        limit=limit,
        offset=offset,
    )
    reactions: dict[str, dict[str, tuple[int, bool]]] = {}

    def rewrites() -> dict[tuple[str, str], PairRewrite]:  # `toollens fix`'s edits of each confused pair
        edits = pairs.kept_pair_edits(session, run_id, run.trajectories)  # kept by a finished run
        if edits is None:
            edits = pairs.compute_pair_edits(session, resolved, cache.memo if cache is not None else None)
        return pair_rewrites(run.name, edits)

    lint = kept("lint", lambda: linting.run_lint(session, run_id))
    # a run with cooperative and other conversations: its headline is the cooperative user's
    every = run.all_profiles if run.cooperative_only else None
    passes = pass_figures(
        run.passed,
        run.scored,
        figs["pass_hat_k"],  # the run's live counters, as the runs list
        int(figs.get("user_errors") or 0)
        if every is None
        else int(((figs.get("profiles") or {}).get(COOPERATIVE) or {}).get("user_errors") or 0),
        0 if every is None else every.scored - run.scored,
    )
    for r in figs["reactions"]:
        cell = reactions.setdefault(r["error_kind"], {})
        n, ok = cell.get(r["reaction"], (0, True))
        cell[r["reaction"]] = (n + r["count"], ok and r["acceptable"])

    def page_url(at: int) -> str:
        """The trajectory list at another offset, filters and page size kept."""
        return "?" + urlencode({**filters, "offset": max(at, 0), "limit": trajs.limit}) + "#trajectories"

    cost = f.usage.cost_usd if f.usage is not None else None
    return RunPage(
        run=run,
        figures=f,
        confusion=confusion,
        heatmap=heatmap,
        outcomes_by_kind=figures.outcome_bars(figs["outcomes_by_fault_kind"], "kind", "by fault kind")
        if figs["outcomes_by_fault_kind"]
        else None,
        outcomes_by_step=figures.outcome_bars(
            [{**g, "step": f"call #{int(g['step']) + 1}"} for g in figs["outcomes_by_step"]], "step", "by faulted call"
        )
        if figs["outcomes_by_step"]
        else None,
        reactions=reactions,
        reaction_kinds=sorted(reactions),
        trajectories=trajs,
        filters=filters,
        blocking=blocking(run),
        health=labels.run_health(session, run_id),
        passes=passes,
        cards=cards(f),
        order_violations=sum(v.count for v in f.dependency_violations),
        order_checks=int(figs.get("dependency_checks") or 0),
        cost_per_trajectory=cost / f.trajectories if cost is not None and f.trajectories else None,
        pager=pager(trajs.count, trajs.limit, trajs.offset, page_url),
        lint=lint,
        causes=causes(f.causes, lint),
        turns=fold_turns(queries.turn_list(figs.get("turns"))),
        rewrites=kept(f"rewrites {run.name}", rewrites),
        blame=blame_figures(session, run_id, scored=run.scored, passed=run.passed, cooperative=run.cooperative_only),
        causes_missing=int(figs.get("causes_missing") or 0),
        cooperation=gap_view(run_gap(session, run_id, figs["profiles"]) if "profiles" in figs else None),
        behind=Behind.of(figs),
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run(
    request: Request,
    resolved: ResolvedRun,
    session: ReadSession,
    failure: str = "",
    expected: str = "",
    called: str = "",
    fault_kind: str = "",
    outcome: str = "",
    passed: str = "",
    cause: str = "",
    blame: str = "",
    limit: Limit = 50,
    offset: Offset = 0,
) -> HTMLResponse:
    blame = blame if blame in BLAMES else ""
    filters = {
        k: v
        for k, v in {
            "failure": failure,
            "expected": expected,
            "called": called,
            "fault_kind": fault_kind,
            "outcome": outcome,
            "passed": passed,
            "cause": cause,
            "blame": blame,
        }.items()
        if v
    }
    page = run_page(
        session, resolved.with_suite, filters=filters, limit=limit, offset=offset, cache=request.app.state.figures
    )
    return render(request, "run.html", page=page)
