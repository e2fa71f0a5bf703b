"""The trajectory's detail record (app/core/score/detail.py) on real runs: what scoring finds is read
into typed parts with nothing left over, and written, read and written again it is the same
JSON byte for byte (the stored format is a contract); a row of an older or newer ToolLens
(a key missing, a key unknown, a value of another shape) reads and writes unchanged."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory
from app.core.score.detail import Blame, FirstDivergence, Part, TrajectoryDetail, stored_detail
from app.core.score.divergence import Divergence
from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite
from app.importers import convert
from app.importers.base import Options
from app.store.rows import to_json
from tests.resources import DATA, shared_data

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
TAU_TOOLS = DATA / "tau_bench_tool_schemas_airline_retail.json"
TAU2 = DATA / "tau2" / "claude-sonnet-4-6_airline_ironforge.json"


def _unread(part: Any) -> list[str]:
    """Every key kept as stored (not read into its type), in the part and the parts it holds."""
    if not isinstance(part, Part):
        return []
    out = list(part.extra)
    for k in part.keys:
        value = getattr(part, k, None)
        for p in value if isinstance(value, tuple) else (value,):
            out += [f"{k}.{x}" for x in _unread(p)]
    return out


def _details(fmt: str, path: Path, options: Options) -> list[tuple[str, int, TrajectoryDetail]]:
    conversion = convert(fmt, path, options)
    scorer = Scorer(parse_suite(conversion.suite))
    return [
        (t.case_id, t.trial, scorer.score(t).detail().with_inputs(t))
        for _, t in conversion.records()
        if not isinstance(t, InvalidTrajectory)
    ]


def _round_trip(details: list[tuple[str, int, TrajectoryDetail]]) -> Counter[str]:
    keys: Counter[str] = Counter()
    for _, _, d in details:
        text = to_json(d.to_dict())  # what the store writes
        assert text is not None and _unread(d) == []
        back = stored_detail(json.loads(text))
        assert back == d and to_json(back.to_dict()) == text  # the same parts, the same bytes
        keys.update(d.keys)
    return keys


@shared_data(TAU, TAU_TOOLS)
def test_tau_bench_details_read_typed_and_write_the_same_json() -> None:
    details = _details("tau-bench", TAU, Options(tools=TAU_TOOLS))
    keys = _round_trip(details)
    assert len(details) == 100 and keys["divergence"] == keys["blame"] == 69 and keys["messages"] == 100
    assert "batches" not in keys and "agent_error" not in keys
    d = next(d for case, trial, d in details if (case, trial) == ("task-0", 0))
    assert d.fault is not None and (d.fault.step, d.fault.kind, d.fault.source, d.fault.turn) == (4, "error", "tool", 6)
    assert d.divergence is not None and d.divergence.key == "arguments:book_reservation:"
    assert d.outcome == "confused" and d.blame is not None and d.blame.blame == "agent"
    assert (len(d.turns), len(d.messages), d.step_turns is not None) == (8, 15, True)
    assert list(d.to_dict())[:3] == ["has_reference", "fault", "missing_steps"]  # the order always written


@shared_data(TAU2)
def test_tau2_details_with_batches_round_trip() -> None:
    details = _details("tau2", TAU2, Options())
    keys = _round_trip(details)
    assert len(details) == 7 and keys["batches"] == 7 and keys["divergence"] == 5
    assert list(details[0][2].to_dict())[-3:] == ["step_turns", "messages", "batches"]


OLD = {
    "has_reference": True,
    "fault": {"step": 1, "kind": "timeout"},
    "missing_steps": [2],
    "outcome": "gave_up",
    "outcome_evidence": {"give_up_phrase": "no puedo", "ungrounded_values": "x"},
    "blame": {"blame": "user", "confidence": 0.9, "findings": []},
    "stopped": "step_limit",
    "messages": [{"role": "user", "content": "hola"}],
    "from_a_newer_toollens": {"a": 1},
}


def test_a_row_of_another_version_reads_and_writes_unchanged() -> None:
    d = stored_detail(json.loads(json.dumps(OLD)))
    assert d.to_dict() == OLD and list(d.to_dict()) == list(OLD)
    assert d.fault is not None and (d.fault.step, d.fault.kind, d.fault.source) == (1, "timeout", None)
    assert d.missing_steps == (2,) and d.excused_steps == () and d.divergence is None
    assert d.blame is not None and d.blame.blame == "user" and d.blame.findings == () and "notes" not in d.blame.keys
    assert d.messages[0].content == "hola" and d.messages[0].calls_before is None
    assert d.extra == {"from_a_newer_toollens": {"a": 1}}
    ev = d.outcome_evidence  # a value of another shape is kept as stored, its field left at its default
    assert ev is not None and ev.give_up_phrase == "no puedo" and ev.ungrounded_values == ()
    assert ev.extra == {"ungrounded_values": "x"} and not ev.has("ungrounded_values") and ev.has("give_up_phrase")
    assert stored_detail(None) == stored_detail([1]) == TrajectoryDetail() and TrajectoryDetail().to_dict() == {}


def test_a_divergence_found_later_is_written_last_as_a_merge_into_the_row_would() -> None:
    found = Divergence("missing_step", "buscar_pedido", "", None, 0)
    d = stored_detail(OLD).with_divergence(found)
    assert d.to_dict() == {**OLD, "divergence": found.to_dict()} and list(d.to_dict())[-1] == "divergence"
    assert d.divergence == FirstDivergence.of_divergence(found) and d.divergence.key == found.key
    again = stored_detail(d.to_dict()).with_divergence(found)  # set again: in its place
    assert list(again.to_dict()) == list(d.to_dict())
    assert Blame.from_dict({"blame": "agent", "at": "3"}).extra == {}  # kept as given: JSON, not checked types


def test_a_list_page_reads_only_what_it_shows_and_writes_the_rest_as_stored() -> None:
    d = stored_detail(OLD, ("fault", "blame"))
    assert d.fault is not None and d.fault.kind == "timeout" and d.blame is not None and d.blame.blame == "user"
    assert d.messages == () and d.json("messages") == OLD["messages"] and d.to_dict() == OLD
