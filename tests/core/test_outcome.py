"""Outcome classification, amount normalisation and reactions."""

from __future__ import annotations

import json
import random
import re

import pytest

from app.core.score import outcome
from app.core.score.grounding import Source
from app.core.score.outcome import (
    DEFAULT_GIVE_UP_PHRASES,
    AfterFault,
    canonical_number,
    classify_outcome,
    extract_values,
    reaction_to,
)
from app.core.suites.tolerance import fold
from tests.resources import DATA, shared_data


@pytest.mark.parametrize(
    ("token", "canon"),
    [
        ("142.900", "142900"),
        ("142,900", "142900"),
        ("142900", "142900"),
        ("142 900", "142900"),
        ("1.234.567", "1234567"),
        ("142.900,50", "142900.5"),
        ("1,234.5", "1234.5"),
        ("3.5", "3.5"),
        ("15.000", "15000"),
        ("0042", "42"),
    ],
)
def test_amounts_are_normalised(token: str, canon: str) -> None:
    assert canonical_number(token) == canon


def test_values_found_in_a_spanish_answer() -> None:
    v = extract_values("Tu saldo es $142.900; la nota NC-40021 del 05/03/2024, pedido PED-12345, paso 2.")
    assert "142900" in v.numbers
    assert "2" not in v.numbers  # short numbers are prose
    assert {"nc-40021", "ped-12345"} <= v.ids
    assert v.dates == {"2024-03-05"}


def classify(
    answer: str,
    observations: list[tuple[int, str, bool]],
    datum: list[str] | None = None,
    question: str = "¿Saldo del cliente 12345678-9?",
    fault: int = 1,
    reward: float | None = None,
    succeeded: bool | None = None,
    handoff: str | None = None,
) -> str:
    sources = [Source("the question", question), *(Source(f"call #{i + 1}", t) for i, t, _ in observations)]
    after = AfterFault(answer, handoff=handoff, ok_after=any(ok and i > fault for i, _, ok in observations))
    return classify_outcome(
        after=after,
        sources=sources,
        observations=observations,
        fault_index=fault,
        expected_datum=datum,
        give_up_phrases=DEFAULT_GIVE_UP_PHRASES,
        reward=reward,
        succeeded=succeeded,
    ).outcome


OBS_FAULT = [(0, '{"id": 8812}', True), (1, "ERROR 503: servicio no disponible", False)]
OBS_RETRY = [*OBS_FAULT, (2, '{"saldo": 142900}', True)]


def test_the_four_outcomes_with_a_datum() -> None:
    assert classify("Tu saldo es 142,900 pesos", OBS_RETRY, ["142900"]) == "recovered"
    assert classify("Tu saldo es $142.900", OBS_FAULT, ["142900"]) == "hallucinated"
    assert classify("No pude consultar el saldo, intenta más tarde", OBS_FAULT, ["142900"]) == "gave_up"
    assert classify("Tu cliente se llama Ana", OBS_FAULT, ["142900"]) == "confused"


def test_another_invented_value_is_hallucinated_even_when_giving_up() -> None:
    assert classify("No pude ver el saldo, pero debería rondar $98.000", OBS_FAULT, ["142900"]) == "hallucinated"


def test_values_from_the_question_and_error_messages_are_grounded() -> None:
    # 503 comes from the error message, 12345678-9 from the question
    assert (
        classify("El servicio respondió 503 para el RUT 12345678-9; no pude continuar.", OBS_FAULT, ["142900"])
        == "gave_up"
    )


def test_without_a_datum_success_needs_a_good_observation_after_the_fault() -> None:
    assert classify("Listo, tu id es 8812", OBS_RETRY) == "recovered"
    assert classify("Listo.", OBS_FAULT) == "confused"
    assert classify("Listo, tu saldo es 77.000", OBS_RETRY) == "hallucinated"


def test_reward_decides_success_for_imported_runs() -> None:
    assert classify("ok", OBS_FAULT, reward=1.0) == "recovered"
    assert classify("ok", OBS_RETRY, reward=0.0) == "confused"


def test_recovered_means_the_case_still_succeeds() -> None:
    # a good observation after the fault and a grounded answer, but the case fails (a wrong tool): not recovered
    assert classify("Listo, tu id es 8812", OBS_RETRY, succeeded=False) == "confused"
    assert classify("Listo, tu id es 8812", OBS_RETRY, succeeded=True) == "recovered"
    # the datum after the fault is not enough when the case fails on another family
    assert classify("Tu saldo es 142,900 pesos", OBS_RETRY, ["142900"], succeeded=False) == "confused"


def test_a_hand_off_after_the_error_is_an_honest_give_up() -> None:
    assert classify("", OBS_FAULT, handoff="transfer_to_human_agents") == "gave_up"
    # ... unless the agent invented a value on the way
    assert classify("Su saldo es 98.000", OBS_FAULT, handoff="transfer_to_human_agents") == "hallucinated"
    # ending on the error, saying nothing, is not a give-up
    assert classify("", OBS_FAULT) == "confused"


def test_reactions() -> None:
    names = ["ver_saldo", "ver_saldo", "buscar_cliente"]
    same = [{"id": 1}, {"id": 1}, {}]
    fixed = [{"id": "1"}, {"id": 1}, {}]

    def react(
        i: int, kind: str, args: list[object], said: str | None = None, handoff: frozenset[str] = frozenset()
    ) -> tuple[str, bool]:
        nxt = i + 1 if i + 1 < len(names) else None
        r = reaction_to(
            i,
            kind,
            names,
            args,
            next_call=None if said is not None else nxt,
            said_next=said,
            handoff=handoff,
            give_up_phrases=DEFAULT_GIVE_UP_PHRASES,
        )
        return r.reaction, r.acceptable

    assert react(0, "http_503", same) == ("retry_same", True)
    assert react(0, "http_500", same) == ("retry_same", False)  # flagged: 500 is not transient
    assert react(0, "schema", fixed)[0] == "retry_corrected"
    assert react(1, "not_found", same)[0] == "switch_tool"
    assert react(1, "not_found", same, handoff=frozenset({"buscar_cliente"})) == ("gave_up", True)
    assert react(2, "timeout", same, said="No pude") == ("gave_up", True)
    assert react(2, "timeout", same, said="Unfortunately, there are not enough seats") == ("gave_up", True)
    assert react(2, "timeout", same, said="Tu saldo es 5") == ("answered", True)
    assert react(2, "timeout", same) == ("stopped", False)  # the run ends on the error


def test_a_datum_seen_only_before_the_fault_is_not_a_recovery() -> None:
    before = [(0, '{"saldo": 142900}', True), (1, "ERROR 503", False)]
    assert classify("Tu saldo es $142.900", before, ["142900"]) == "confused"


# The date and number patterns in their plain form (as they were): app.core.score.outcome writes
# them so that each begins with a character class (fast to search), and must match exactly these.
_PLAIN_DATE = re.compile(
    r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b|\b\d{1,2}[-/.]\d{1,2}[-/.]\d{4}\b"
    r"|\b\d{1,2}\s+de\s+[a-z]+\s+(?:de|del)\s+\d{4}\b"
)
_PLAIN_NUM = re.compile(r"\d+(?:[.,\s]\d{3})*(?:[.,]\d+)?|\d+")
_TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"


def _same_matches(texts: list[str]) -> None:
    for text in texts:
        for t in (fold(text), text):  # values are found in folded text; mentions() matches a datum as given
            assert outcome._DATE_RX.findall(t) == _PLAIN_DATE.findall(t), t
            assert outcome._DATE_RX.sub(" ", t) == _PLAIN_DATE.sub(" ", t), t
            assert outcome._NUM_RX.findall(t) == _PLAIN_NUM.findall(t), t
            assert bool(outcome._NUM_RX.fullmatch(t)) == bool(_PLAIN_NUM.fullmatch(t)), t


def test_the_fast_value_patterns_match_what_the_plain_ones_match() -> None:
    edges = [
        "nc-40021 12345678-9 x12345678 _1 a_1 a-1 1-a -1 a1- é1 a٣ ٣٣٣٣-٠١-٠٢ 𝟙𝟚𝟛 1\u00a0234",
        "2024-03-05 5/3/2024 05.03.2024 12024-03-05 2024-03-051 a2024-03-05 5 de marzo de 2024 "
        "15 de marzo del 2024 5 de  marzo de 20245 x5 de marzo de 2024",
        "$142.900; 142,900.50; 1 234 567; 0042; 3.5; ²³; 1²3",
        "",
    ]
    rng = random.Random(7)
    alphabet = [*"ab kz09-_.,/ \n\té٣²𝟙\u00a0", "de ", " del ", "2024", "12345678-9", "nc-40021", "__", "É"]
    noise = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    _same_matches(edges + noise)
    # the patterns found what they should, not only the same as each other
    assert extract_values(edges[1]).dates == {"2024-03-05", "2024-03-15"}
    assert extract_values(edges[2]).numbers == {"142900", "142900.5", "1234567", "123"}


@shared_data(_TAU)
def test_the_fast_value_patterns_match_on_real_tool_outputs() -> None:
    runs = json.loads(_TAU.read_text())
    texts = [str(m["content"]) for r in runs for m in r["traj"] if m.get("content")]
    assert len(texts) > 1000
    _same_matches(texts)


def _direct_ungrounded(stated: set[str], texts: list[str]) -> set[str]:
    """Grounding by direct appearance only, against every text at once."""
    grounded: set[str] = set()
    for text in texts:
        grounded |= outcome._ground(text)
    return {v for v in stated if v not in grounded}


def test_grounding_stops_early_and_never_grounds_less_than_direct_appearance() -> None:
    question = "Mi RUT es 12345678-9, ¿cuál es el saldo?"
    texts = [question, '{"nota": "NC-400", "monto": 142900}', '{"id": "X-21"}', "Error: timeout"]
    assert outcome._ungrounded({"nc-400-21"}, texts) == []  # its digit runs come from two different texts
    assert outcome._ungrounded({"999999", "142900"}, texts) == ["999999"]
    read: list[str] = []

    def ground_text(text: str) -> frozenset[str]:
        read.append(text)
        return outcome._ground(text)

    sources = [Source(f"text {i}", t) for i, t in enumerate(texts)]
    assert outcome.ground({"142900", "21"}, sources, ground_text).ungrounded == []
    assert read == texts[:0:-1]  # the latest texts ground both: the question is not read
    read.clear()
    assert outcome.ground(set(), sources, ground_text).ungrounded == [] and read == []
    if _TAU.exists():  # every tau-bench answer against its own conversation
        for run in json.loads(_TAU.read_text()):
            texts = [str(m["content"]) for m in run["traj"] if m["role"] in ("user", "tool") and m.get("content")]
            answer = next(
                (str(m["content"]) for m in reversed(run["traj"]) if m["role"] == "assistant" and m.get("content")), ""
            )
            stated = extract_values(answer).all()
            assert set(outcome._ungrounded(stated, texts)) <= _direct_ungrounded(stated, texts)
