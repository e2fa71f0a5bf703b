"""The trajectory page's "Add to a suite" form: what it shows (the draft's
steps, the suites to pick) and the edits it sends."""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.core.advise import curate
from app.core.errors import SuiteError
from app.core.records import MAX_DEPTH, clean_text, clean_value
from app.store import curation, ingest
from app.store.errors import NotFound
from app.store.models import SuiteRow
from app.store.queries import StoredTrajectory
from app.store.views import SuitePublic

RULES = ("exact", "ignore", "number", "date", "set")  # what the form offers per argument


@dataclass(frozen=True)
class ArgRow:
    field: str
    value: str  # as JSON
    proposed: str  # the draft's rule, as JSON ("" when none)


@dataclass(frozen=True)
class StepRow:
    index: int
    name: str
    turn: int
    attempts: int
    args: list[ArgRow]
    name_only: bool


@dataclass(frozen=True)
class ArgChoice:
    """An argument's row of the form with what was sent for it (the proposed rule, nothing, when not)."""

    arg: ArgRow
    key: str  # "index.field": the form's names for it
    rule: str
    abs: str  # the number tolerance


@dataclass(frozen=True)
class StepChoice:
    """A step's row of the form with what was sent for it (kept, when nothing was)."""

    step: StepRow
    keep: bool
    args: list[ArgChoice]


@dataclass
class CurateForm:
    """What the "Add to a suite" form shows: the draft's steps and the suites to pick."""

    case_id: str
    suites: list[SuitePublic]  # the newest version of each name
    suite_id: int
    steps: list[StepRow]
    left_out: list[curate.LeftOut]
    turns: int
    values: dict[str, str] = field(default_factory=dict)  # what was sent, shown again after an error
    error_field: str = ""
    error: str = ""
    rules: tuple[str, ...] = RULES

    def _sent(self, name: str, default: str = "") -> str:
        return self.values.get(name, default)

    @property
    def suite_choice(self) -> str:
        """The suite selected: the id (as text) or "new"."""
        return self._sent("suite") or str(self.suite_id)

    @property
    def new_suite(self) -> str:
        return self._sent("new_suite")

    @property
    def case_id_sent(self) -> str:
        return self._sent("case_id", self.case_id)

    @property
    def expected_datum(self) -> str:
        return self._sent("expected_datum")

    @property
    def expected_state(self) -> str:
        return self._sent("expected_state")

    @property
    def rows(self) -> list[StepChoice]:
        """The steps with what was sent for each."""
        return [
            StepChoice(
                s,
                not self.values or self._sent(f"keep.{s.index}") == "on",
                [
                    ArgChoice(a, key, self._sent(f"rule.{key}", "proposed"), self._sent(f"abs.{key}"))
                    for a in s.args
                    for key in (f"{s.index}.{a.field}",)
                ],
            )
            for s in self.steps
        ]


def curate_form(session: Session, trajectory_id: int, stored: StoredTrajectory | None = None) -> CurateForm:
    """The form for a trajectory (``stored``: as the page loaded it, read again otherwise)."""
    t, traj = curation.stored_trajectory(session, trajectory_id, stored)
    run = ingest.get_run_row(session, t.run_id)
    d = curate.draft(traj, ingest.suite_for_run(session, run).toolset)
    own = ingest.get_suite_row(session, run.suite_id).name
    newest = {s.name: s for s in curation.newest_suites(session, always=own)}
    steps = [
        StepRow(
            index=s.index,
            name=s.name,
            turn=s.turn,
            attempts=len(s.calls),
            name_only=s.arguments is None,
            args=[
                ArgRow(
                    k,
                    json.dumps(v, ensure_ascii=False),
                    json.dumps(s.tolerance[k], ensure_ascii=False) if k in s.tolerance else "",
                )
                for k, v in (s.arguments or {}).items()
            ],
        )
        for s in d.steps
    ]
    return CurateForm(
        case_id=f"{t.case_id}-{t.id}",
        suites=list(newest.values()),
        suite_id=newest[own].id if own in newest else run.suite_id,
        steps=steps,
        left_out=d.left_out,
        turns=len(d.turns),
    )


def _rule(form: dict[str, str], index: int, name: str) -> Any:
    chosen = form.get(f"rule.{index}.{name}", "proposed")
    if chosen == "number":
        raw = form.get(f"abs.{index}.{name}", "0").strip() or "0"
        try:
            bound = float(raw)
        except ValueError:
            bound = math.nan
        if not math.isfinite(bound) or bound < 0:
            raise SuiteError("the number tolerance is a number of 0 or more", field=f"calls[{index}].tolerance.{name}")
        return {"number": {"abs": bound}}
    if chosen not in RULES:
        raise SuiteError(f"choose one of {', '.join(RULES)}", field=f"calls[{index}].tolerance.{name}")
    return chosen


def form_edits(form: dict[str, str], steps: list[StepRow]) -> curate.Edits:
    """The edits the form says, in the API's terms."""
    calls: dict[int, curate.CallEdit] = {}
    for step in steps:
        keep = form.get(f"keep.{step.index}") == "on"
        rules = {
            a.field: _rule(form, step.index, a.field)
            for a in step.args
            if form.get(f"rule.{step.index}.{a.field}", "proposed") != "proposed"
        }
        calls[step.index] = curate.CallEdit(keep=keep, tolerance=rules)
    state_text = form.get("expected_state", "").strip()
    state = None
    if state_text:
        try:
            state = clean_value(json.loads(state_text))
        except (ValueError, RecursionError):
            raise SuiteError(f"not JSON, or nested deeper than {MAX_DEPTH} levels", field="expected_state") from None
        if not isinstance(state, dict):
            raise SuiteError("a JSON object (the part of the final state to check)", field="expected_state")
    datum = clean_text(form.get("expected_datum", "").strip())
    case_id = clean_text(form.get("case_id", "").strip())
    if not case_id or len(case_id) > 256:
        raise SuiteError("required, at most 256 characters", field="case_id")
    return curate.Edits(case_id=case_id, calls=calls, expected_datum=[datum] if datum else None, expected_state=state)


@dataclass(frozen=True)
class Added:
    """What the page says after a case was added: the suite version it made."""

    suite: SuitePublic
    case_id: str


def added_note(session: Session, suite_id: int | None, case_id: str) -> Added | None:
    if suite_id is None:
        return None
    try:
        row = ingest.get_suite_row(session, suite_id)
    except NotFound:
        return None
    return Added(curation.suite_public(row), case_id[:256])


def submit(
    session: Session, page: CurateForm, trajectory_id: int, form: dict[str, str], token: str | None
) -> tuple[SuiteRow, curate.Edits]:
    """Add the case the form describes; SuiteError names the field at fault."""
    if token is not None and not secrets.compare_digest(form.get("token", "").encode(), token.encode()):
        raise SuiteError("the API token is wrong", field="token")
    edits = form_edits(form, page.steps)
    target = form.get("suite", "")
    new_suite = clean_text(form.get("new_suite", "").strip())[:200] if target == "new" else None
    if target == "new" and not new_suite:
        raise SuiteError("name the new suite", field="new_suite")
    suite_id = page.suite_id if target == "new" else int(target) if target.isdigit() and len(target) < 10 else 0
    row, _ = curation.add_case(
        session, suite_id=suite_id, trajectory_id=trajectory_id, edits=edits, new_suite=new_suite
    )
    return row, edits
