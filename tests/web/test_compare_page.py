"""The compare page, top to bottom: figures (a zero-threshold family above
zero in B reads "blocking"), flipped cases linked to both trajectories and
their call-level diff, the confusion difference, then the changed
descriptions once each, folded. Real HTTP, both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.web.templating import fault_label
from tests.factories import examples_client

HTML = {"accept": "text/html"}


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "banca-v1", "banca-v2") as c:
        yield c


def reads_as(text: str, family: str) -> str:
    row = re.search(rf'<th scope="row">{family}</th>(.*?)</tr>', text, re.S)
    assert row is not None, family
    return re.sub(r"<[^>]+>", "", re.findall(r"<td>(.*?)</td>", row.group(1), re.S)[-1]).strip()


def test_threshold_zero_above_zero_in_b_is_blocking(client: TestClient) -> None:
    forward = client.get("/compare?a=1&b=2", headers=HTML).text
    # B (v2): invented data after an error in 1 of 6; no hallucinated tool (0 of 71)
    assert reads_as(forward, "hallucination after error") == "blocking: must be 0"
    assert reads_as(forward, "hallucinated tools") == "within noise (interval holds 0)"
    backward = client.get("/compare?a=2&b=1", headers=HTML).text
    assert reads_as(backward, "hallucinated tools") == "blocking: must be 0"  # v1 called unknown tools 2 of 79 times
    assert reads_as(backward, "selection precision") == "worse"


def test_order_links_and_folded_descriptions(client: TestClient) -> None:
    text = client.get("/compare?a=1&b=2", headers=HTML).text
    order = [
        text.index(marker) for marker in ('id="deltas"', 'id="flipped"', 'id="confusion-diff"', 'id="description-diff"')
    ]
    assert order == sorted(order)
    flipped = re.search(r'<table class="trajectories" id="flipped">.*?</table>', text, re.S)
    assert flipped is not None
    first = re.findall(r"<tr><td>(.*?)</tr>", flipped.group(0), re.S)[0]
    links = re.findall(r'href="([^"]+)"', first)
    a, b = (
        client.get("/api/compare?a=1&b=2").json()["flipped"][0]["a_trajectory"],
        client.get("/api/compare?a=1&b=2").json()["flipped"][0]["b_trajectory"],
    )
    assert links == [f"/trajectories/{a}", f"/trajectories/{b}", f"/compare/trajectories?a={a}&b={b}"]
    # the seven changed descriptions, each once, folded under a count
    folded = re.search(r'<details id="description-diff"[^>]*>(.*?)</details>', text, re.S)
    assert folded is not None and "open" not in folded.group(0)[:60]
    assert 'Tool descriptions that changed <small class="muted">7;' in folded.group(1)
    assert folded.group(1).count('<article class="desc-diff">') == 7
    assert folded.group(1).count('class="worddiff"') == 7 and 'class="side"' not in folded.group(1)


def test_fault_labels_count_calls_from_one() -> None:
    assert fault_label("0:http_503") == "http_503 at call #1"
    assert fault_label("2:timeout") == "timeout at call #3"
    assert fault_label("") == "—"


def test_the_page_opens_with_both_pass_rates_and_mcnemar(client: TestClient) -> None:
    """v1 passes 13 of its 36 trajectories, v2 29 of 36: B − A is 16/36 = +44.4 points; the two
    files hold the same 36 (case, trial, fault) keys, and every trajectory v1 passes v2 passes too: none
    passed only in A, 29 − 13 = 16 only in B, exact McNemar p = 2 · 0.5^16 = 3.05e-05."""
    text = client.get("/compare?a=1&b=2", headers=HTML).text
    head = re.search(r'<div class="run-head" id="pass">(.*?)</div>', text, re.S)
    assert head is not None and text.index('id="pass"') < text.index('id="deltas"')
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", head.group(1))).strip()
    assert words.startswith(
        "A passed 36.1% 13/36 pass^6 0.00 B passed 80.6% 29/36 pass^6 0.00 B − A +44.4 pts +21.9 pts to +61.2 pts"
    )  # Newcombe's 95% interval, as the families' rows
    assert words.endswith(
        "B passes more, unlikely to be noise: of 36 shared trajectories, 0 passed only in A "
        "and 16 only in B (exact McNemar p = 3.05e-05)"
    )
    assert 'class="badge ok"' in head.group(1)
    back = client.get("/compare?a=2&b=1", headers=HTML).text
    assert "B − A</span> <b>-44.4 pts</b>" in back and "B fails more, unlikely to be noise" in back
