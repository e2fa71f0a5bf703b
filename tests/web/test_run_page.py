"""The run page's answer to "why did my agent fail?", over the example run
(banca v1, 36 trajectories): ranked causes with their counts and filters,
pass rate and pass^k, and the heatmap's tones. Real HTTP, both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.advise import fix
from app.store import pairs
from app.web.pages import run as run_page
from tests.factories import EXAMPLES, examples_client

HTML = {"accept": "text/html"}


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "v1") as c:
        yield c


def test_causes_are_ranked_and_link_to_exactly_their_trajectories(client: TestClient) -> None:
    with client.app.state.sessions() as s:  # type: ignore[attr-defined]
        page = run_page.run_page(s, 1, filters={}, limit=50, offset=0)
    got = [(c.count, c.href) for c in page.causes]
    # 23 of 36 failed; each counted once, under its first divergence (ties by name)
    assert got == [
        (4, "?cause=wrong_tool%3Abuscar_pedido%3Abuscar_producto#trajectories"),
        (3, "?cause=schema%3Aemitir_nota_credito%3A#trajectories"),
        (2, "?cause=hallucinated_tool%3Acancelar_pedido%3A#trajectories"),
        (1, "?cause=arguments%3Aemitir_nota_credito%3A#trajectories"),
        (1, "?cause=arguments%3Ainiciar_devolucion%3A#trajectories"),
    ]
    assert page.causes[0].sentence.startswith(
        "4 failed trajectories: called buscar_producto where buscar_pedido was expected — "
        "buscar_pedido and buscar_producto read alike (descriptions, similarity 0.62)"
    )
    assert page.causes[1].sentence == (
        "3 failed trajectories: emitir_nota_credito called with arguments that break its schema"
    )
    # each link lists as many trajectories as the cause says, every one of them failed
    for cause in page.causes:
        text = client.get("/runs/1" + cause.href.split("#")[0], headers=HTML).text
        assert f"{cause.count} shown by the filter" in text, cause.href
        assert text.count('class="badge ok">passed') == 0


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
        heat = run_page.run_page(s, 1, filters={}, limit=50, offset=0).heatmap
    cols = [c for c, _ in heat.called]
    row = next(r for r in heat.rows if r.expected == "buscar_pedido")  # 10 right, 4 + 1 + 1 wrong, of 16
    tones = {cols[i]: (c.count, c.tone) for i, c in enumerate(row.cells) if c.count}
    assert tones == {
        "buscar_pedido": (10, "agree-3"),
        "buscar_producto": (4, "err-2"),
        "cancelar_pedido": (1, "err-1"),
        "(missing)": (1, "err-1"),
    }
    assert dict(heat.called)["cancelar_pedido"] == "hallucinated"
    assert dict(heat.called)["(missing)"] == "missing"
    cell = row.cells[cols.index("buscar_producto")]
    assert cell.href == "?expected=buscar_pedido&called=buscar_producto#trajectories"


def test_causes_kept_while_the_run_is_unchanged_and_rebuilt_after_a_batch(client: TestClient) -> None:
    cache = client.app.state.figures  # type: ignore[attr-defined]
    cache.interval = 0  # a receiving run's figures computed again at each read (test_live_figures.py: the interval)

    def causes() -> list[tuple[int, str]]:
        with client.app.state.sessions() as s:  # type: ignore[attr-defined]
            page = run_page.run_page(s, 1, filters={}, limit=50, offset=0, cache=cache)
        return [(c.count, c.href.split("#")[0]) for c in page.causes]

    first = causes()
    assert first[:2] == [
        (4, "?cause=wrong_tool%3Abuscar_pedido%3Abuscar_producto"),
        (3, "?cause=schema%3Aemitir_nota_credito%3A"),
    ]
    assert causes() == first
    # the same 36 trajectories again as new trials: every cause sinks twice as many
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    again = [{**r, "trial": r.get("trial", 0) + 10} for r in recs]
    assert client.post("/api/runs/1/trajectories", json={"trajectories": again}).status_code == 200
    assert causes() == [(2 * n, href) for n, href in first]


def test_the_rewrites_are_computed_once_per_set_of_inputs_and_equal_the_uncached_ones(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live run's rewrites (nothing kept: it is not finished) are computed once per view of a
    batch, and not at all when the batch changes neither which pairs are confused nor the examples."""
    cache = client.app.state.figures  # type: ignore[attr-defined]
    made: list[int] = []
    proposals = fix.pair_proposals

    def counted(*args: Any, **kw: Any) -> Any:
        made.append(1)
        return proposals(*args, **kw)

    monkeypatch.setattr(pairs, "pair_proposals", counted)

    def rewrites(cached: bool) -> dict[tuple[str, str], run_page.PairRewrite]:
        with client.app.state.sessions() as s:  # type: ignore[attr-defined]
            return run_page.run_page(s, 1, filters={}, limit=50, offset=0, cache=cache if cached else None).rewrites

    first = rewrites(True)
    assert list(first) == [
        ("buscar_pedido", "buscar_producto"),
        ("buscar_pedido", "verificar_compra"),
        ("emitir_nota_credito", "verificar_compra"),
    ] and made == [1]
    assert rewrites(True) == first and made == [1]  # the second view reads no call
    assert rewrites(False) == first and made == [1, 1]
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    again = [{**r, "trial": r.get("trial", 0) + 10} for r in recs]
    assert client.post("/api/runs/1/trajectories", json={"trajectories": again}).status_code == 200
    # a batch: twice the confusions, the same pairs and the same first value of each argument
    assert rewrites(True) == first and made == [1, 1]
    assert rewrites(False) == first and made == [1, 1, 1]


def test_a_cause_named_by_the_agent_is_bounded_escaped_and_filtered_exactly(client: TestClient) -> None:
    name = "<img src=x onerror=alert(1)>:" + "x" * 220  # 250 characters: the records allow 256
    rec = {
        "case_id": "saldo-001",
        "trial": 99,
        "question": "?",
        "answer": "listo",
        "calls": [{"name": name, "arguments": {}, "observation": "{}"}],
    }
    assert client.post("/api/runs/1/trajectories", json={"trajectories": [rec]}).status_code == 200
    causes = client.get("/api/runs/1/figures", params={"cases_limit": 1}).json()["causes"]
    mine = next(c for c in causes if c["kind"] == "hallucinated_tool" and c["tool"].startswith("<img"))
    assert mine["count"] == 1 and len(mine["tool"]) == 200  # bounded
    assert mine["filter"]["cause"].count(":") == 2 and "%3A" in mine["filter"]["cause"]  # its own colon escaped
    listed = client.get("/api/runs/1/trajectories", params=mine["filter"]).json()
    assert [t["trial"] for t in listed["data"]] == [99]
    page = client.get(f"/trajectories/{listed['data'][0]['id']}", headers=HTML).text
    why = page[page.index('id="why"') : page.index("</div>", page.index('id="why"'))]
    assert "<img" not in why and "&lt;img src=x onerror=alert(1)&gt;" in why
    assert 'href="#call-1"' in why


def _why(client: TestClient, case_id: str, trial: int, **params: str) -> str:
    data = client.get("/api/runs/1/trajectories", params={"case_id": case_id, "limit": 10, **params}).json()["data"]
    tid = next(t["id"] for t in data if t["trial"] == trial)
    page = client.get(f"/trajectories/{tid}", headers=HTML).text
    if 'id="why"' not in page:
        return ""
    block = page[page.index('id="why"') : page.index("</div>", page.index('id="why"'))]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", block.split(">", 1)[1])).strip()


def test_the_trajectory_page_says_why_in_a_sentence_or_two(client: TestClient) -> None:
    assert _why(client, "pedido-002", 0) == (
        "First divergence: at call #1 the agent called buscar_producto where "
        "expected step #1 buscar_pedido was expected."
    )
    assert _why(client, "saldo-004", 1) == "First divergence: expected step #3 buscar_pedido: no call was made for it."
    # the fault met badly: one sentence, the evidence in it
    assert _why(client, "saldo-001", 2, outcome="hallucinated") == (
        "First divergence: after the error at call #2 (ver_saldo) the agent stated values that no call returned "
        "(142900): outcome hallucinated."
    )
    # passed after a fault: no divergence, the outcome with its evidence
    assert _why(client, "saldo-001", 0, outcome="recovered") == (
        "After the error at call #2 (ver_saldo) the agent tried it again once (at call #3), and gave the expected "
        "datum 142900: outcome recovered."
    )
    assert _why(client, "saldo-003", 0) == ""  # passed, no fault: nothing to explain


def test_pass_hat_k_of_thousands_of_trials_prints_a_few_values_and_a_curve_of_sixty_points() -> None:
    # a run of 10^6 calls on 20 cases has 9,035 trials a case: the page printed 9,035 values and a
    # curve of 9,035 points (15 ms of a request); it picks k = 1..8 and four up to the last
    hat_k = {str(k): 1 / k for k in range(1, 9036)}
    many = run_page.pass_figures(10, 20, hat_k)
    assert [k for k, _ in many.hat_k] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 95, 927, 9035]  # 9035 ** (i / 4), rounded
    assert many.hat_k[-1] == (9035, 1 / 9035)
    assert len(many.points) == 60 and many.points[0] == (1, 1.0) and many.points[-1][0] == 9035
    assert many.curve.startswith("0.0,2.0 ") and many.curve.endswith(" 100.0,30.0")
    few = run_page.pass_figures(10, 20, {1: 0.5, 2: 0.25})  # as computed (numbers) or read back (text)
    assert (few.hat_k, few.points, few.curve) == ([(1, 0.5), (2, 0.25)], [], "0.0,16.0 100.0,23.0")


def test_the_run_page_reads_its_run_and_suite_rows_once(client: TestClient) -> None:
    """Each helper of the page asks for the run (and its suite) by id; the request resolves the run
    once with its suite and the session holds them, so the rows are read by one statement a request,
    not once a helper (a round trip each on PostgreSQL)."""
    from sqlalchemy import event

    engine = client.app.state.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def note(conn: object, cursor: object, statement: str, *rest: object) -> None:
        seen.append(" ".join(statement.split()))

    client.get("/runs/1", headers=HTML)  # warm: the figures cache, the parsed suite
    event.listen(engine, "before_cursor_execute", note)
    try:
        assert client.get("/runs/1", headers=HTML).status_code == 200
    finally:
        event.remove(engine, "before_cursor_execute", note)
    by_id = [s for s in seen if re.search(r"FROM (runs|suites)\b.* WHERE (runs|suites)\.id = ", s)]
    # were 8 runs and 2 suites, then a run and a suite: now the run resolved once, with its suite (deps.ResolvedRun)
    assert len(by_id) == 1 and "FROM runs JOIN suites ON" in by_id[0], by_id
