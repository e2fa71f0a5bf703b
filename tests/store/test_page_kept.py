"""A finished run keeps what its page's first view computed from its counters and calls (table
``run_page_kept``: its report's pass^k, the rewrites of its confused pairs); a page reads them, and its
HTML and figures equal those computed without them; a run without them (finished by an older ToolLens,
or stale) is computed as before, and ``toollens db backfill`` keeps them. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select, update

from app.core.advise.fix import PAIR_EDITS_VERSION
from app.core.reports import report as report_module
from app.store import backfill, pairs, queries
from app.store.db import session_scope
from app.store.models import RunPageKept
from app.web.state import FiguresCache
from tests.factories import examples_client

HTML = {"accept": "text/html"}
VIEWS = ("/runs/1", "/runs/1?expected=buscar_pedido&called=buscar_producto", "/api/runs/1/figures")


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "v1") as c:
        yield c


def _views(client: TestClient) -> dict[str, str]:
    """Each view as a new process's first (the figures cache, and the pass^k of the runs' tallies,
    emptied before it)."""
    out = {}
    for path in VIEWS:
        client.app.state.figures = FiguresCache()  # type: ignore[attr-defined]
        queries._PASS_HAT_K.clear()
        r = client.get(path, headers=HTML)
        assert r.status_code == 200, r.text[:300]
        out[path] = r.text
    return out


def _kept(client: TestClient) -> tuple[int, int, dict[str, Any], list[Any]] | None:
    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        row = s.get(RunPageKept, 1)
        return None if row is None else (row.trajectories, row.version, dict(row.pass_hat_k), list(row.pair_edits))


def _edit(client: TestClient, **values: Any) -> None:
    with session_scope(client.app.state.sessions, write=True) as s:  # type: ignore[attr-defined]
        if values:
            s.execute(update(RunPageKept).where(RunPageKept.run_id == 1).values(**values))
        else:
            s.execute(delete(RunPageKept))


def _computing_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def computed(*args: Any, **kw: Any) -> Any:
        raise AssertionError("computed on a page")

    monkeypatch.setattr(pairs, "run_examples", computed)  # the run's first good calls: never read
    monkeypatch.setattr(report_module, "pass_hat_k", computed)


def test_finishing_keeps_the_pages_figures_and_the_pages_read_them_unchanged(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kept(client) is None  # a run receiving: nothing kept
    assert client.post("/api/runs/1/finish").status_code == 200
    kept = _kept(client)
    assert kept is not None
    trajectories, version, pass_hat_k, edits = kept
    # 36 trajectories, at most 6 trials a case: pass^1..6 as the page states them (k=1 0.38, k=2 0.06)
    assert (trajectories, version, pass_hat_k) == (36, PAIR_EDITS_VERSION, {"k": 6, "values": [0.3843, 0.0593, 0.01]})
    assert [(a, b, [(tool, pattern) for tool, pattern, _ in by]) for a, b, by in edits] == [
        (
            "buscar_pedido",
            "buscar_producto",
            [
                ("buscar_producto", "negative_delimitation"),
                ("buscar_pedido", "distinct_names"),
                ("buscar_producto", "distinct_names"),
            ],
        ),
        (
            "buscar_pedido",
            "verificar_compra",
            [
                ("buscar_pedido", "distinct_names"),
                ("verificar_compra", "distinct_names"),
                ("buscar_pedido", "negative_delimitation"),
            ],
        ),
        (
            "emitir_nota_credito",
            "verificar_compra",
            [
                ("verificar_compra", "negative_delimitation"),
                ("verificar_compra", "distinct_names"),
                ("emitir_nota_credito", "negative_delimitation"),
            ],
        ),
    ]
    with monkeypatch.context() as m:
        _computing_nothing(m)
        read = _views(client)
    _edit(client)  # a run finished before they were kept: computed as before, the same bytes
    assert _views(client) == read
    assert _kept(client) is None  # a page never writes them


def test_kept_figures_of_another_trajectory_count_or_wording_are_not_read(client: TestClient) -> None:
    assert client.post("/api/runs/1/finish").status_code == 200
    computed = _views(client)
    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        assert s.scalar(select(func.count()).select_from(RunPageKept)) == 1
    wrong = [["buscar_pedido", "buscar_producto", [["buscar_producto", "distinct_names", [["insert", "WRONG"]]]]]]
    _edit(client, trajectories=35, pass_hat_k={"k": 1, "values": [0.5]}, pair_edits=wrong)  # kept before a batch landed
    assert _views(client) == computed
    _edit(client, trajectories=36, version=PAIR_EDITS_VERSION - 1)  # worded by another ToolLens
    views = _views(client)
    assert views != computed and "WRONG" not in views["/runs/1"]  # the rewrites computed, pass^k read:
    assert '"pass_hat_k":{"1":0.5}' in views["/api/runs/1/figures"] and "one trial per case" in views["/runs/1"]
    _edit(client, pass_hat_k={"k": 6, "values": [0.3843, 0.0593, 0.01]})  # (numbers: no wording)
    assert _views(client) == computed
    _edit(client, version=PAIR_EDITS_VERSION)
    assert "WRONG" in _views(client)["/runs/1"]  # what is kept is what is shown


def test_the_backfill_keeps_them_for_a_run_finished_before(client: TestClient) -> None:
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    assert client.post("/api/runs/1/finish").status_code == 200
    finished = _kept(client)
    _edit(client)
    assert [d.aggregates for d in backfill.backfill(sessions)] == [True]
    assert _kept(client) == finished
    assert [d.aggregates for d in backfill.backfill(sessions)] == [False]  # once
    _edit(client, version=PAIR_EDITS_VERSION - 1, pair_edits=[])  # worded by an older ToolLens
    assert [d.aggregates for d in backfill.backfill(sessions)] == [True]
    assert _kept(client) == finished


def test_pass_hat_k_is_kept_without_the_zeros_that_end_it() -> None:
    for values in ([0.3843, 0.0593, 0.01, 0.0, 0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 0.0, 0.25, 0.0], []):
        kept = queries.kept_pass_hat_k(values)
        assert queries._pass_hat_k_of(kept) == {str(k): v for k, v in enumerate(values, 1)}
    assert queries.kept_pass_hat_k([0.336, 0.115, *[0.0] * 9033]) == {"k": 9035, "values": [0.336, 0.115]}
    assert queries.kept_pass_hat_k([0.5, 0.0, 0.25, 0.0]) == {"k": 4, "values": [0.5, 0.0, 0.25]}
