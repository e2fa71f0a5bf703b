"""The trajectory page's timeline: expected steps beside executed calls,
each call's status in words, and a conversation's rows grouped by user turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.score.detail import TrajectoryDetail
from app.store.views import CallPublic, TrajectoryPublic

# What a reaction's name alone does not say, on the timeline.
REACTION_WORDS = {"ignored_error": ": went on as if the call had worked"}


@dataclass(frozen=True)
class ExpectedStep:
    """A step of the case's reference, as the timeline shows it."""

    name: str
    arguments: Any  # JSON
    tolerance: dict[str, str]  # argument -> its rule, described

    @classmethod
    def of(cls, e: dict[str, Any]) -> ExpectedStep:
        return cls(str(e["name"]), e.get("arguments"), e.get("tolerance") or {})


@dataclass
class TimelineRow:
    """One line of the timeline: an expected step and/or an executed call."""

    expected: ExpectedStep | None
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
        words = (
            f"then: {call.reaction['reaction']}"
            + REACTION_WORDS.get(call.reaction["reaction"], "")
            + ("" if ok else " (not acceptable)")
        )
        out.append(("muted" if ok else "bad", words))
    if not out:
        out.append(("ok", "ok"))
    return out


def timeline(t: TrajectoryPublic, d: TrajectoryDetail) -> list[TimelineRow]:
    """Expected steps and executed calls side by side, in call order, each
    expected step once: a missing step sits where it was expected, or, when
    a call was aligned to it (a wrong tool), is marked on that call's row."""
    expected = t.expected_calls or []
    missing = [j for j in d.missing_steps if j < len(expected)]
    excused = set(d.excused_steps)
    beside: dict[int, TimelineRow] = {}  # expected step -> the first row that shows it beside a call
    shown: set[int] = set()
    rows: list[TimelineRow] = []
    for call in t.calls:
        for j in [m for m in missing if call.step is not None and m < call.step and m not in shown]:
            if j not in {c.step for c in t.calls}:
                rows.append(
                    TimelineRow(
                        expected=ExpectedStep.of(expected[j]), step=j, call=None, status=[("bad", "missing step")]
                    )
                )
                shown.add(j)
        exp = expected[call.step] if call.step is not None and call.step < len(expected) else None
        again = call.step in beside
        row = TimelineRow(
            expected=None if again or exp is None else ExpectedStep.of(exp),
            step=call.step,
            call=call,
            status=_call_status(call),
            again=again,
        )
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
            rows.append(
                TimelineRow(
                    expected=ExpectedStep.of(expected[j]),
                    step=j,
                    call=None,
                    status=[("muted" if j in excused else "bad", words)],
                )
            )
    for j in d.undone_steps:  # taken on the right tool, but no call of it succeeded
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


def turn_groups(t: TrajectoryPublic, d: TrajectoryDetail, rows: list[TimelineRow]) -> list[TurnGroup] | None:
    """The timeline grouped by user turn (None: not a conversation)."""
    if not d.turns:
        return None
    expected = t.expected_calls or []
    groups = [
        TurnGroup(i + 1 if x.turn is None else int(x.turn), str(x.user), [], list(x.failures or []))
        for i, x in enumerate(d.turns)
    ]
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
    for m in d.messages:  # in order: a user message opens the next turn
        if m.role == "user":
            turn += 1
        elif m.role == "assistant" and str(m.content).strip():
            group(max(turn, 1)).agent.append(str(m.content))
    return sorted(groups, key=lambda g: g.turn)
