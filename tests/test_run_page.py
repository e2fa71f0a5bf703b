"""The run page's answer to "why did my agent fail?", over the example run
(banca v1, 36 trajectories): ranked causes with their counts and filters,
pass rate and pass^k, and the heatmap's tones. Real HTTP, both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.web import contexts
from tests.factories import EXAMPLES, examples_client

HTML = {"accept": "text/html"}


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "v1") as c:
        yield c


def test_causes_are_ranked_and_link_to_exactly_their_trajectories(client: TestClient) -> None:
    with client.app.state.sessions() as s:  # type: ignore[attr-defined]
        page = contexts.run_page(s, 1, filters={}, limit=50, offset=0)
    got = [(c.count, c.href) for c in page.causes]
    # a step never done: the two give-ups, the invented balance and the "quedó emitida" after a refused
    # call, the confused one; invented data after any tool error: after a 503, a schema error, an unknown tool
    assert got == [(5, "?failure=schema#trajectories"), (5, "?failure=step_not_done#trajectories"),
                   (4, "?expected=buscar_pedido&called=buscar_producto#trajectories"),
                   (3, "?failure=recovery_hallucinated#trajectories"),
                   (2, "?expected=%28extra%29&called=buscar_producto#trajectories")]
    assert page.causes[1].sentence == ("5 trajectories never got an expected step done (its calls failed, "
                                       "or it gave up first)")
    assert page.causes[2].sentence.startswith(
        "4 trajectories called buscar_producto where buscar_pedido was expected (4 calls) — "
        "buscar_pedido and buscar_producto read alike (descriptions, similarity 0.62)")
    assert page.causes[0].why == "most often buscar_cliente.rut (1 call)"
    # each link lists as many trajectories as the cause says
    for cause in page.causes:
        text = client.get("/runs/1" + cause.href.split("#")[0], headers=HTML).text
        assert f"{cause.count} shown by the filter" in text, cause.href


def test_pass_rate_and_pass_hat_k(client: TestClient) -> None:
    text = client.get("/runs/1", headers=HTML).text
    # 13 of the 36 trajectories pass (an honest give-up is no success); pass^1 is the mean over cases
    # of passes/trials
    assert re.search(r"passed</span> <b>36.1%</b>", text)
    assert ">13</a> of 36 trajectories" in text and ">23 failed</a>" in text
    assert "k=1 <b>0.38</b>" in text and "k=2 <b>0.06</b>" in text
    assert '<polyline points="0.0,19.2 20.0,28.3' in text  # k=1: 30 - 28 * 0.3843; k=2: 30 - 28 * 0.0593


def test_heatmap_tones_agreement_apart_from_errors(client: TestClient) -> None:
    with client.app.state.sessions() as s:  # type: ignore[attr-defined]
        heat = contexts.run_page(s, 1, filters={}, limit=50, offset=0).heatmap
    cols = [c for c, _ in heat.called]
    row = next(r for r in heat.rows if r.expected == "buscar_pedido")  # 10 right, 4 + 1 + 1 wrong, of 16
    tones = {cols[i]: (c.count, c.tone) for i, c in enumerate(row.cells) if c.count}
    assert tones == {"buscar_pedido": (10, "agree-3"), "buscar_producto": (4, "err-2"),
                     "cancelar_pedido": (1, "err-1"), "(missing)": (1, "err-1")}
    assert dict(heat.called)["cancelar_pedido"] == "hallucinated"
    assert dict(heat.called)["(missing)"] == "missing"
    cell = row.cells[cols.index("buscar_producto")]
    assert cell.href == "?expected=buscar_pedido&called=buscar_producto#trajectories"


def test_causes_kept_while_the_run_is_unchanged_and_rebuilt_after_a_batch(client: TestClient) -> None:
    cache = client.app.state.figures  # type: ignore[attr-defined]

    def causes() -> list[tuple[int, str]]:
        with client.app.state.sessions() as s:  # type: ignore[attr-defined]
            page = contexts.run_page(s, 1, filters={}, limit=50, offset=0, cache=cache)
        return [(c.count, c.href.split("#")[0]) for c in page.causes]

    first = causes()
    assert first[:3] == [(5, "?failure=schema"), (5, "?failure=step_not_done"),
                         (4, "?expected=buscar_pedido&called=buscar_producto")]
    assert causes() == first
    # the same 36 trajectories again as new trials: every cause sinks twice as many
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    again = [{**r, "trial": r.get("trial", 0) + 10} for r in recs]
    assert client.post("/api/runs/1/trajectories", json={"trajectories": again}).status_code == 200
    assert causes() == [(2 * n, href) for n, href in first]
