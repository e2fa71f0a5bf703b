"""The catalogue of failure families (app/core/score/families.py) holds together, and
whatever counts, lists or declares the families follows it."""

from __future__ import annotations

import marshal
import re
from collections import Counter
from pathlib import Path

from app.core.reports.evaluate import score_trajectories
from app.core.reports.report import TURN_KEYS, Report
from app.core.score.families import (
    BLOCKING_KEYS,
    BY_KEY,
    FAILURE_FAMILY,
    FAMILIES,
    FAMILY_FAILURE,
    PER_CALL_FAMILIES,
    RATIO_FAMILIES,
    RATIO_KEYS,
    Failure,
    family_of,
)
from app.core.score.scoring import TrajectoryScore
from app.core.score.turns import TurnScore, TurnTable
from app.store.views import FiguresPublic
from tests.factories import FAIL_SALDO, OK_CLIENTE, banking_suite, call, record

ROOT = Path(__file__).resolve().parents[2]


def test_every_failure_belongs_to_exactly_one_family() -> None:
    owners = Counter(failure for f in FAMILIES for failure in f.failures)
    assert owners == Counter(set(Failure)), "a failure in no family, or in two"
    assert set(FAILURE_FAMILY) == set(Failure)
    assert all(family_of(failure) == FAILURE_FAMILY[failure].key for failure in Failure)


def test_keys_codes_and_titles_are_unique_and_grouped() -> None:
    assert len(BY_KEY) == len(FAMILIES)
    titles = [f.title for f in FAMILIES]
    assert len(set(titles)) == len(titles)
    codes = [f.code for f in FAMILIES if f.code]
    # an F-code names one group: its families are adjacent and share its heading
    assert codes == sorted(codes) and sorted(set(codes)) == [f"F{i}" for i in range(1, 6)]
    for code in set(codes):
        assert len({f.heading for f in FAMILIES if f.code == code}) == 1, code
    assert len({f.heading for f in FAMILIES}) == len(set(codes)) + sum(not f.code for f in FAMILIES)


def test_a_figure_stands_for_a_failure_of_its_group() -> None:
    for f in FAMILIES:
        if f.shows is not None:
            assert any(f.shows in g.failures for g in FAMILIES if g.code == f.code), f.key
    assert all(FAMILY_FAILURE[key] is BY_KEY[key].shows for key in FAMILY_FAILURE)
    assert all(BY_KEY[key].shows is not None for key in BLOCKING_KEYS)  # the gate lists their trajectories


def test_a_blocking_figure_beside_others_on_a_card_says_it_must_be_zero() -> None:
    for f in RATIO_FAMILIES:
        group = [g for g in RATIO_FAMILIES if g.heading == f.heading]
        if f.blocking and not all(g.blocking for g in group):
            assert f.zero_note.endswith("must be 0"), f.key


def test_the_failure_names_are_those_of_the_docs() -> None:
    formats = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    listed = re.search(r"Failure names: (.*?)\n\n", formats, re.S)  # the paragraph that lists them
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == [f.value for f in Failure]


def test_the_curation_filters_of_the_docs_are_the_catalogue() -> None:
    """What ``--where failure=`` takes (docs/api.md): every failure, listed once in docs/formats.md
    (where api.md points), then the figures standing for one."""
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = re.search(r"`failure=` a failure name(.*?);", api, re.S)
    assert listed is not None
    pointer, families = re.split(r"\s+or\s+", listed.group(1), maxsplit=1)
    assert "formats.md#failure-names" in pointer
    formats = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    names = re.search(r'<a id="failure-names"></a>.*?Failure names: (.*?)\(', formats, re.S)
    assert names is not None
    assert re.findall(r"`(\w+)`", names.group(1)) == [f.value for f in Failure]
    assert re.findall(r"`(\w+)`", families) == list(FAMILY_FAILURE)


def test_counter_slots_follow_the_catalogue() -> None:
    """Each family's numerator and denominator land in its own slots: values all
    different, so a slot read from another attribute shows."""
    turn = TurnScore(1)
    for i, name in enumerate(a for f in RATIO_FAMILIES for a in (f.num, f.den)):
        setattr(turn, name, getattr(turn, name) or 100 + i)  # a den shared by two families keeps its first value
    per_call = {a: 10 + i for i, a in enumerate(a for f in PER_CALL_FAMILIES for a in (f.num, f.den))}
    ts = TrajectoryScore("c1", 1, True, [])
    for name, value in per_call.items():
        setattr(ts, name, value)
    ts.turns = TurnTable.of([turn])
    report = Report()
    report.add(ts)
    assert TURN_KEYS[-2:] == ("trajectories", "failed")
    figures = report.turns_json()["1"]
    for f in RATIO_FAMILIES:
        assert figures[f.key] == {"num": getattr(turn, f.num), "den": getattr(turn, f.den)}, f.key
        assert turn.figures()[f.key] == figures[f.key]
    assert figures["trajectories"] == 1
    for f in PER_CALL_FAMILIES:
        assert report.ratio(f.key).to_dict() == {"num": per_call[f.num], "den": per_call[f.den]}, f.key
        assert ts.summary()["figures"][f.key] == {"num": per_call[f.num], "den": per_call[f.den]}


def test_the_report_and_its_public_model_list_the_ratio_families_in_order() -> None:
    assert tuple(Report().to_json())[: len(RATIO_KEYS)] == RATIO_KEYS
    assert tuple(FiguresPublic.model_fields)[: len(RATIO_KEYS)] == RATIO_KEYS
    assert all(FiguresPublic.model_fields[k].annotation.__name__ == "RatioPublic" for k in RATIO_KEYS)  # type: ignore[union-attr]


def test_scored_failures_are_plain_strings_a_batch_can_marshal() -> None:
    """Scores hold each failure's value, never the enum member: marshal (the
    scoring worker's pipe) writes exact ``str`` only."""
    suite = banking_suite()
    trajs = [
        record(calls=[OK_CLIENTE, call("ver_saldo", {"id": "8812"}), call("cancelar_pedido", {})], answer="Listo"),
        record(calls=[OK_CLIENTE, FAIL_SALDO], answer="Tu saldo es $142.900", fault={"step": 1, "kind": "http_503"}),
    ]
    report = score_trajectories(suite, trajs)
    failures = [f for case in report.cases for f in case["failures"]]
    assert set(failures) == {"step_not_done", "schema", "hallucinated_tool", "recovery_hallucinated"}
    assert all(type(f) is str for f in [*failures, *report.failures])
    marshal.dumps(list(report.counters()))


def test_the_help_that_names_failures_and_blocking_families_names_the_catalogues() -> None:
    """The CLI's help is written out (it must not import the core to start), so it is held to the catalogue here."""
    from typer.testing import CliRunner

    from app.cli import cli

    def help_of(command: str) -> str:
        out = CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}).output
        return " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())

    curate = help_of("curate")
    assert all(f"{failure}," in curate for failure in Failure), curate
    blocking = ", ".join(f.name for f in FAMILIES if f.blocking)
    assert f"a blocking family ({blocking}: threshold zero)" in help_of("score")
