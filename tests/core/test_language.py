"""Language detection: the toolset's or the message's own language decides the
language of hints, proposals and simulated answers."""

from __future__ import annotations

import pytest

from app.core.language import detect_language, language_scores


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["Busca un pedido por su numero (formato PED-12345).", "Busca un producto por su SKU."], "es"),
        (["Obtiene el saldo de una cuenta. Usa el RUT del cliente."], "es"),
        (["Quiero cancelar mi reserva del martes"], "es"),
        (["Shows the working tree status", "Returns the commit log of the repository."], "en"),
        (["Get the weather forecast for a city and a number of days."], "en"),
        (["I want to cancel my reservation"], "en"),
        ([""], "en"),  # no cue at all: English
        ([], "en"),
    ],
)
def test_detect_language(texts: list[str], expected: str) -> None:
    assert detect_language(texts) == expected


def test_accents_are_folded_and_counts_are_per_word() -> None:
    assert language_scores(["Número de la cuenta, también"]) == {"es": 4, "en": 0}  # numero, de, la, tambien
    assert language_scores(["the id of the user"]) == {"es": 0, "en": 4}  # the, of, the, user
