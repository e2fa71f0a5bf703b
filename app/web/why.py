"""The trajectory page's first answer: one or two sentences above the
timeline naming the first divergence and the outcome with its evidence, each
call linked to its row (``#call-N``, ``#step-N``). Built here, displayed by the
template as segments (the template escapes every one of them)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.score.detail import Evidence, FirstDivergence, TrajectoryDetail
from app.core.score.families import cause_of
from app.store.views import TrajectoryPublic


@dataclass(frozen=True)
class Segment:
    """A piece of a sentence: plain words, a tool or field name (``code``), or a link to a row."""

    text: str
    href: str = ""
    code: bool = False


def _call(i: int | None) -> Segment:
    return Segment("the end of the run") if i is None else Segment(f"call #{i + 1}", f"#call-{i + 1}")


def _step(j: int | None, tool: str) -> list[Segment]:
    label = "expected step" if j is None else f"expected step #{j + 1}"
    return [Segment(label, "" if j is None else f"#step-{j + 1}"), Segment(" "), Segment(tool, code=True)]


def divergence_sentence(d: FirstDivergence) -> list[Segment]:
    """The first divergence in words (the catalogue's, families.CAUSES), its call or step linked."""
    kind, tool, other = str(d.kind), str(d.tool), str(d.other)
    i = d.call if isinstance(d.call, int) else None
    j = d.step if isinstance(d.step, int) else None
    out = [Segment("First divergence: ")]
    for role, text in cause_of(kind).sentence(tool, other):
        if role == "call":
            out.append(_call(i))
        elif role == "step":
            out += _step(j, text)
        else:
            out.append(Segment(text, code=role == "code"))
    return out


def _ending(evidence: Evidence, answer: str) -> str:
    """How the run ended after the fault, from the outcome's evidence."""
    if evidence.handoff:
        return f"handed the conversation to a person ({evidence.handoff})"
    if evidence.give_up_phrase:
        return f"said it could not (\u201c{evidence.give_up_phrase}\u201d)"
    values = evidence.ungrounded_values or ()
    if values:
        shown = ", ".join(str(v) for v in values[:3])
        return f"stated values that no call returned ({shown})"
    if evidence.ended_on_error or evidence.said_after_fault is False:
        return "ended without telling the user"
    if evidence.datum_in_answer:
        return f"gave the expected datum {evidence.datum_in_answer}"
    said = " ".join(answer.split())
    if not said:
        return "ended without an answer"
    return f"answered \u201c{said[:120]}{'…' if len(said) > 120 else ''}\u201d"


def outcome_sentence(t: TrajectoryPublic, d: TrajectoryDetail, lead: str = "After the error at ") -> list[Segment]:
    """What the agent did after the fault and how it ended, with the outcome."""
    i = None if d.fault is None else d.fault.step
    if t.outcome is None or not isinstance(i, int) or not 0 <= i < len(t.calls):
        return []
    faulted = t.calls[i]
    again = [c for c in t.calls[i + 1 :] if c.name == faulted.name]
    failed = [c for c in again if c.error]
    out = [Segment(lead), _call(i), Segment(" ("), Segment(faulted.name, code=True), Segment(") the agent ")]
    if again:
        n = len(again)
        out += [
            Segment("tried it again once (at " if n == 1 else f"tried it again {n} times (last at "),
            _call(again[-1].index),
            Segment(")"),
        ]
        if failed:
            out.append(Segment(", every one failing" if len(failed) == n else f", {len(failed)} of them failing"))
        out.append(Segment(", and "))
    out.append(Segment(_ending(d.outcome_evidence or Evidence(), t.answer)))
    out.append(Segment(f": outcome {t.outcome}."))
    return out


def why(t: TrajectoryPublic, detail: TrajectoryDetail) -> list[list[Segment]]:
    """The sentences above the timeline (none for a passed trajectory without a fault)."""
    d = None if t.passed else detail.divergence
    if d is not None and d.kind == "recovery":  # the error met badly: the outcome sentence says it all
        said = outcome_sentence(t, detail, "First divergence: after the error at ")
        if said:
            return [said]
    out = [] if d is None else [divergence_sentence(d)]
    said = outcome_sentence(t, detail)
    if said:
        out.append(said)
    return out
