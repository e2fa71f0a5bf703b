"""The causes catalogue (families.CAUSES) and per-turn attribution (families.PER_TURN):
the docs list them, and a kind added to the catalogue alone is named, ranked, worded
and attributed everywhere without touching another module."""

from __future__ import annotations

import re

import pytest

from app.core.records import parse_record
from app.core.reports.report import Report
from app.core.score import families
from app.core.score.detail import FirstDivergence
from app.core.score.divergence import Divergence, _order, cause_text
from app.core.score.families import CAUSES, PER_TURN, Attribution, Cause, Failure
from app.core.score.scoring import Scorer
from app.core.score.turns import turn_scores
from app.web.why import Segment, divergence_sentence
from tests.core.test_turns import CARELESS, _suite
from tests.resources import ROOT


def test_the_cause_kinds_are_those_of_the_docs_and_ranked_once() -> None:
    formats = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    table = re.search(r"\| `kind` \| the divergence \|\n\|---\|---\|\n((?:\|.*\n)+)", formats)
    assert table is not None
    assert re.findall(r"^\| `(\w+)` \|", table.group(1), re.M) == [c.kind for c in CAUSES]
    assert sorted(c.rank for c in CAUSES) == list(range(len(CAUSES)))
    assert min(CAUSES, key=lambda c: c.rank).kind == "hallucinated_tool"  # at one call, named first


def test_per_turn_attribution_names_only_failures_and_leaves_the_state_to_no_turn() -> None:
    assert set(PER_TURN) <= {f.value for f in Failure}
    assert Failure.STATE.value not in PER_TURN
    assert all(type(name) is str for name in PER_TURN)  # what a turn lists crosses processes by marshal


def test_an_unknown_kind_reads_as_unexplained() -> None:
    assert cause_text("no_such_kind", "", "") == "failed with no divergence from the case found"


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cause kind and a failure kind that exist only in the catalogue's tables."""
    cause = Cause(
        "throwaway",
        -1,
        lambda tool, other: f"threw {tool} away ({other})",
        lambda tool, other: (
            ("", "at "),
            families.CALL,
            ("", " the agent threw "),
            ("code", tool),
            ("", " away, then "),
            ("step", other),
            ("", "."),
        ),
    )
    monkeypatch.setitem(families.CAUSE, "throwaway", cause)
    monkeypatch.setitem(PER_TURN, "throwaway", Attribution(call=lambda cs: cs.name == "cancelar_pedido"))


@pytest.mark.usefixtures("throwaway")
def test_a_kind_added_to_the_catalogue_alone_is_worded_ranked_and_attributed() -> None:
    d = Divergence("throwaway", "cancelar_pedido", "emitir", call=3, step=2)
    # the terminal's and the figures' words
    assert d.text == "threw cancelar_pedido away (emitir)"
    report = Report()
    report.causes[d.cause] += 2
    assert report.causes_json()[0]["text"] == "threw cancelar_pedido away (emitir)"
    # the trajectory page's sentence, its call and step linked
    assert divergence_sentence(FirstDivergence.from_dict(d.to_dict())) == [
        Segment("First divergence: "),
        Segment("at "),
        Segment("call #4", "#call-4"),
        Segment(" the agent threw "),
        Segment("cancelar_pedido", code=True),
        Segment(" away, then "),
        Segment("expected step #3", "#step-3"),
        Segment(" "),
        Segment("emitir", code=True),
        Segment("."),
    ]
    # its rank: at one call it is named before a hallucinated tool (rank 0)
    assert _order(d, 3) < _order(Divergence("hallucinated_tool", "x", call=3), 3)
    # per turn: the conversation's failure goes to the turn of the call its rule names
    suite = _suite()
    traj = parse_record(CARELESS)
    ts = Scorer(suite).score(traj)
    ts.failures.append("throwaway")
    table, _ = turn_scores(ts, suite.by_id["nota-002"], traj)
    assert [t.failures for t in table] == [
        ["arguments", "selection", "forbidden_call"],
        ["hallucinated_tool", "throwaway", "selection"],
    ]
