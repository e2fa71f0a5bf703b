"""Grounding: values an agent states, traced to what it was told (hand-computed cases)."""

from __future__ import annotations

import time

from app.core.score import outcome
from app.core.score.grounding import Source, ground


def _ground(stated: set[str], *texts: str) -> dict[str, object]:
    sources = [Source(f"call #{i + 1}", t) for i, t in enumerate(texts)]
    return ground(stated, sources, outcome._ground).to_dict()


def test_direct_appearance_names_the_source() -> None:
    g = _ground({"142900"}, '{"id": 8812}', '{"saldo": 142900}')
    assert g["grounded"] == {"142900": "in call #2"} and g["ungrounded"] == []


def test_sums_and_differences_of_observed_amounts() -> None:
    # tau-bench task 8: 1000 = two certificates of 500; 1327 = 1000 + 327
    g = _ground({"1000", "1327"}, '{"certificate_1": 500, "certificate_2": 500}', '{"gift_card": 327}')
    assert g["ungrounded"] == []
    assert g["grounded"]["1000"] == "1000 = 500 + 500 (call #1)"
    assert g["grounded"]["1327"] == "1327 = 327 + 500 + 500 (call #2, call #1)"
    # tau-bench task 9: 583 = 833 - 250
    g = _ground({"583"}, "833.0", '{"amount": 250}')
    assert g["grounded"] == {"583": "583 = 833 - 250 (call #1, call #2)"}
    # three terms
    g = _ground({"1435"}, '{"a": 673, "b": 327, "c": 435}')
    assert g["grounded"]["1435"] == "1435 = 327 + 435 + 673 (call #1)"


def test_small_numbers_take_no_part_in_sums() -> None:
    # 1437 would be 1436 + 1: not grounded
    assert _ground({"1437"}, '{"total": 1436, "bags": 1}')["ungrounded"] == ["1437"]


def test_trailing_digits_of_an_observed_id() -> None:
    # tau-bench task 3: "gift card ending in 6644"
    g = _ground({"6644"}, '{"payment_methods": {"gift_card_6276644": {"amount": 113}}}')
    assert g["grounded"] == {"6644": "digits of 6276644 (call #1)"}
    assert _ground({"644"}, '{"id": "gift_card_6276644"}')["ungrounded"] == ["644"]  # fewer than 4 digits


def test_products_and_shares_with_an_observed_quantity() -> None:
    g = _ground({"2499"}, '{"price": 833, "passengers": 3}')
    assert g["grounded"] == {"2499": "2499 = 833 × 3 (call #1)"}
    g = _ground({"833"}, '{"total": 2499, "passengers": 3}')
    assert g["grounded"] == {"833": "833 = 2499 ÷ 3 (call #1)"}


def test_a_percentage_needs_the_percentage_observed() -> None:
    g = _ground({"2250"}, '{"fare": 15000}', "Refunds are 15% of the fare")
    assert g["grounded"] == {"2250": "2250 = 15% of 15000 (call #1)"}
    assert _ground({"2250"}, '{"fare": 15000}')["ungrounded"] == ["2250"]


def test_dates_ground_their_year_and_other_spellings() -> None:
    g = _ground({"2024", "2024-05-20"}, '{"date": "2024-05-20"}')
    assert g["ungrounded"] == []
    assert outcome.extract_values("on 20/05/2024").dates == {"2024-05-20"}


def test_an_invented_value_says_where_it_was_looked_for() -> None:
    g = _ground({"98000"}, '{"id": 8812}', "ERROR 503: servicio no disponible")
    assert g["ungrounded"] == ["98000"] and g["looked_in"] == ["call #1", "call #2"]


def test_the_search_is_bounded() -> None:
    # 400 observed numbers and 60 stated values no derivation reaches: milliseconds, not minutes
    obs = " ".join(str(100_003 + 17 * i) for i in range(400))
    stated = {str(9_000_001 + 1000 * i) for i in range(60)}
    start = time.perf_counter()
    g = _ground(stated, obs)
    assert time.perf_counter() - start < 5.0
    assert len(g["ungrounded"]) == 60  # type: ignore[arg-type]
