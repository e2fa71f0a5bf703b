"""The JSON API over a real database (SQLite file and PostgreSQL), in-process
through the app factory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.prices import bundled_prices
from app.core.records import read_jsonl
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import load_suite, load_suite_document
from app.core.usage import UsageTally
from app.settings import Settings
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def records(version: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def new_run(client: TestClient, name: str = "v1", version: str = "v1", **extra: Any) -> int:
    body = {"name": name, "suite": load_suite_document(EXAMPLES / f"suite_{version}.yaml"), "model": "sim", **extra}
    r = client.post("/api/runs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def ingest(client: TestClient, run_id: int, recs: list[dict[str, Any]]) -> dict[str, Any]:
    r = client.post(f"/api/runs/{run_id}/trajectories", json={"trajectories": recs})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_stored_run_reads_like_a_scored_file(client: TestClient) -> None:
    run = new_run(client)
    recs = records("v1")
    # in two batches: the counters add up
    assert ingest(client, run, recs[:20])["stored"] == 20
    assert ingest(client, run, recs[20:]) == {"run_id": run, "stored": 16, "calls": 35, "trajectories_total": 36}
    stored = client.get(f"/api/runs/{run}/figures", params={"cases_limit": 500}).json()
    usage = UsageTally()  # as `toollens score --json` builds it
    scored = score_trajectories(
        load_suite(EXAMPLES / "suite_v1.yaml"), read_jsonl(EXAMPLES / "trajectories_v1.jsonl"), usage=usage
    ).to_json()
    scored["usage"] = usage.to_json(bundled_prices())
    assert stored.pop("cases_total") == 36
    assert stored == scored


def test_runs_list_filters_and_pages(client: TestClient) -> None:
    a = new_run(client, "a", "v1", model="m1")
    b = new_run(client, "b", "v2", model="m2")
    ingest(client, a, records("v1"))
    page = client.get("/api/runs").json()
    assert page["count"] == 2 and [r["name"] for r in page["data"]] == ["b", "a"]
    runs_a = client.get("/api/runs", params={"model": "m1"}).json()["data"]
    assert [r["id"] for r in runs_a] == [a]
    assert runs_a[0]["families"]["selection_precision"] == {"num": 65, "den": 76}
    assert runs_a[0]["dependency_violations"] == 2
    assert [r["id"] for r in client.get("/api/runs", params={"toolset_version": "v2"}).json()["data"]] == [b]
    assert client.get("/api/runs", params={"suite": "nope"}).json()["count"] == 0
    p2 = client.get("/api/runs", params={"limit": 1, "offset": 1}).json()
    assert p2["count"] == 2 and [r["id"] for r in p2["data"]] == [a]


def test_trajectory_filters(client: TestClient) -> None:
    run = new_run(client)
    ingest(client, run, records("v1"))

    def count(**params: Any) -> int:
        r = client.get(f"/api/runs/{run}/trajectories", params=params)
        assert r.status_code == 200, r.text
        return int(r.json()["count"])

    assert count() == 36
    assert count(failure="schema") == 5
    assert count(failure="forbidden_call") == 2
    assert count(expected="buscar_pedido", called="buscar_producto") == 4
    assert count(expected="(extra)", called="cancelar_pedido") == 1
    missing = client.get(f"/api/runs/{run}/confusion").json()
    n_missing = sum(c["count"] for c in missing["cells"] if c["called"] == "(missing)")
    assert n_missing >= 1 and count(called="(missing)") >= 1
    assert count(fault_kind="http_503") + count(fault_kind="timeout") + count(fault_kind="http_500") <= 6
    # every error the agent saw is a recovery case: the balance after a 503, "quedó emitida" after a
    # schema error, "cancelé tu pedido" after an unknown tool
    assert count(outcome="hallucinated") == 3 and count(outcome="gave_up") == 2
    assert count(passed=False) == 36 - count(passed=True)
    assert count(failure="no-such-failure") == 0


def test_filters_counted_from_the_counters_pick_exactly_their_trajectories(client: TestClient) -> None:
    # a failure, an outcome, passed or failed alone is counted from the run's counters (summed over
    # the two batches here), not by a scan; the page still lists exactly the matching trajectories
    run = new_run(client)
    recs = records("v1")
    ingest(client, run, recs[:20])
    ingest(client, run, recs[20:])
    ids = [t["id"] for t in client.get(f"/api/runs/{run}/trajectories", params={"limit": 500}).json()["data"]]
    assert len(ids) == 36

    def page(**params: Any) -> tuple[int, list[int]]:
        body = client.get(f"/api/runs/{run}/trajectories", params={"limit": 500, **params}).json()
        return body["count"], [ids.index(t["id"]) for t in body["data"]]  # positions in the file

    # the two honest give-ups (31, 34) fail too: the step they gave up on was never done
    failed = [1, 3, 6, 7, 8, 10, 11, 12, 15, 17, 18, 19, 21, 22, 24, 25, 26, 27, 29, 31, 32, 33, 34]
    assert page(passed=False) == (23, failed)
    assert page(passed=True) == (13, [i for i in range(36) if i not in failed])
    assert page(outcome="gave_up") == (2, [31, 34])
    # a retried 503 (30, 35), a call the schema refused then corrected (1, 3, 17, 21), an unknown tool then
    # the right one (25)
    assert page(outcome="recovered") == (7, [1, 3, 17, 21, 25, 30, 35])
    assert page(outcome="no-such-outcome") == (0, [])
    assert page(failure="schema") == (5, [1, 3, 17, 19, 21])
    assert page(failure="recovery_confused") == (1, [33])
    assert page(outcome="") == (36, list(range(36)))  # an empty filter is no filter
    # two filters: counted by the query
    assert page(passed=False, outcome="hallucinated") == (3, [19, 26, 32])
    assert page(failure="schema", passed=True) == (0, [])
    deep = client.get(f"/api/runs/{run}/trajectories", params={"passed": False, "limit": 5, "offset": 15}).json()
    assert deep["count"] == 23 and [ids.index(t["id"]) for t in deep["data"]] == failed[15:20]


def test_confusion_matrix_axes(client: TestClient) -> None:
    run = new_run(client)
    ingest(client, run, records("v1"))
    m = client.get(f"/api/runs/{run}/confusion").json()
    assert m["expected"][-1] == "(extra)" and m["called"][-1] == "(missing)"
    assert "cancelar_pedido" in m["called"]
    cell = next(c for c in m["cells"] if c["called"] == "cancelar_pedido")
    assert cell["hallucinated"] is True


def test_one_trajectory_with_its_calls(client: TestClient) -> None:
    run = new_run(client)
    ingest(client, run, records("v1"))
    tid = client.get(f"/api/runs/{run}/trajectories", params={"failure": "schema", "limit": 1}).json()["data"][0]["id"]
    t = client.get(f"/api/trajectories/{tid}").json()
    assert "schema" in t["failures"]
    bad = [c for c in t["calls"] if c["schema_error"]]
    assert bad and bad[0]["schema_error"]["field"] is not None
    assert t["expected_calls"] and all("name" in e for e in t["expected_calls"])
    assert client.get("/api/trajectories/999999").status_code == 404


def test_export_gives_back_the_same_records(client: TestClient) -> None:
    run = new_run(client)
    recs = records("v1")
    ingest(client, run, recs)
    r = client.get(f"/api/runs/{run}/trajectories.jsonl")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert [json.loads(x) for x in r.text.splitlines()] == recs


def test_bad_batch_is_422_with_index_and_field_and_stores_nothing(client: TestClient) -> None:
    run = new_run(client)
    recs = records("v1")
    bad = [*recs[:3], {"case_id": "x", "calls": [{"name": "a", "error": 5}]}]
    r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": bad})
    assert r.status_code == 422
    assert r.json()["detail"] == [{"index": 3, "field": "calls[0].error", "message": "must be null or an object"}]
    assert client.get(f"/api/runs/{run}/trajectories").json()["count"] == 0
    # a duplicate inside one batch, and against what is stored: 409, nothing more stored
    r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": [recs[0], recs[0]]})
    assert r.status_code == 409 and "records 0 and 1" in r.json()["error"]
    ingest(client, run, recs[:2])
    r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": [recs[2], recs[1]]})
    assert r.status_code == 409 and r.json()["error"].startswith("record 1:")
    assert client.get(f"/api/runs/{run}/trajectories").json()["count"] == 2
    assert client.get(f"/api/runs/{run}/figures").json()["trajectories"] == 2


def test_unknown_finished_and_invalid(client: TestClient) -> None:
    assert client.get("/api/runs/12345").json() == {"error": "no run 12345", "detail": []}
    assert client.post("/api/runs/12345/trajectories", json={"trajectories": []}).status_code == 404
    run = new_run(client)
    assert client.post(f"/api/runs/{run}/finish").json()["status"] == "finished"
    r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": records("v1")[:1]})
    assert r.status_code == 409 and "finished" in r.json()["error"]
    assert client.post("/api/runs", json={"name": "v1", "suite_id": 1}).status_code == 409  # name taken
    r = client.post("/api/runs", json={"name": "x"})
    assert r.status_code == 422 and "exactly one" in r.json()["error"]
    r = client.post("/api/runs", json={"name": "x", "suite": {"name": "s", "toolset": "tools.yaml", "cases": []}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "toolset"
    r = client.post("/api/runs", json={"name": "", "suite_id": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "name"


def test_compare_two_runs(client: TestClient) -> None:
    a, b = new_run(client, "a", "v1"), new_run(client, "b", "v2")
    ingest(client, a, records("v1"))
    ingest(client, b, records("v2"))
    c = client.get("/api/compare", params={"a": a, "b": b}).json()
    sel = next(f for f in c["families"] if f["family"] == "selection_precision")
    assert sel["a"] == {"num": 65, "den": 76} and sel["b"] == {"num": 70, "den": 71}
    assert sel["delta"] == pytest.approx(70 / 71 - 65 / 76)
    assert c["shared_cases"] == 36
    assert c["flipped_count"] == len(c["flipped"]) > 0
    assert all(f["a_passed"] != f["b_passed"] for f in c["flipped"])
    m = c["mcnemar"]
    assert m["passed_only_a"] + m["passed_only_b"] == c["flipped_count"]
    assert m["passed_only_b"] > m["passed_only_a"]
    assert 0 < m["p_value"] < 0.05
    assert sel["a_ci"][0] < 65 / 76 < sel["a_ci"][1]
    cell = next(d for d in c["confusion_diff"] if (d["expected"], d["called"]) == ("buscar_pedido", "buscar_producto"))
    assert (cell["a"], cell["b"], cell["delta"]) == (4, 1, -3)
    assert len(c["description_changes"]) == 7 and not any(d["parameters_changed"] for d in c["description_changes"])
    tool = next(t for t in c["tools"] if t["tool"] == "buscar_pedido")
    assert tool["a_recall"]["num"] < tool["a_recall"]["den"]
    pair = client.get(
        "/api/compare/trajectories", params={"a": c["flipped"][0]["a_trajectory"], "b": c["flipped"][0]["b_trajectory"]}
    ).json()
    assert pair["a"]["case_id"] == pair["b"]["case_id"] and pair["rows"]


def test_toolset_versions_and_diff(client: TestClient) -> None:
    new_run(client, "a", "v1")
    new_run(client, "b", "v2")
    v1 = load_suite(EXAMPLES / "suite_v1.yaml").toolset
    v2 = load_suite(EXAMPLES / "suite_v2.yaml").toolset
    toolsets = client.get("/api/toolsets").json()
    assert [t["name"] for t in toolsets] == ["atencion_cliente"]
    versions = toolsets[0]["versions"]
    assert [(v["label"], v["hash"], v["runs"]) for v in versions] == [("v1", v1.version, 1), ("v2", v2.version, 1)]
    assert client.get("/api/toolsets/atencion_cliente").json() == toolsets[0]
    diff = client.get("/api/toolsets/atencion_cliente/diff", params={"a": "v1", "b": v2.version}).json()
    assert (diff["a"], diff["b"]) == (v1.version, v2.version)
    by_tool = {t["name"]: t for t in diff["tools"]}
    assert set(by_tool) == {t.name for t in v1}
    assert {t["change"] for t in diff["tools"]} == {"changed"}
    assert not any(t["parameters_changed"] for t in diff["tools"])
    assert by_tool["ver_saldo"]["description_a"] == v1.get("ver_saldo").description  # type: ignore[union-attr]
    assert client.get("/api/toolsets/nope").status_code == 404
    assert client.get("/api/toolsets/atencion_cliente/diff", params={"a": "v1", "b": "v9"}).status_code == 404


def test_bearer_token_guards_writes(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, api_token="s3cret-token", auto_migrate=False))
    with TestClient(app) as c:
        body = {"name": "t", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")}
        r = c.post("/api/runs", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.post("/api/runs", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/api/runs", json=body, headers={"Authorization": "Bearer s3cret-token"}).status_code == 201
        assert c.get("/api/runs").status_code == 200  # reads stay open


def test_body_limit_is_413(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, max_body_bytes=2048, auto_migrate=False))
    with TestClient(app) as c:
        r = c.post("/api/runs/1/trajectories", json={"trajectories": records("v1")})
        assert r.status_code == 413 and "larger than 2048" in r.json()["error"]


def test_a_cached_comparison_follows_new_batches(client: TestClient) -> None:
    a, b = new_run(client, "a", "v1"), new_run(client, "b", "v2")
    ingest(client, a, records("v1"))
    ingest(client, b, records("v2")[:10])
    first = client.get("/api/compare", params={"a": a, "b": b}).json()
    assert first["shared_cases"] == 10
    ingest(client, b, records("v2")[10:])
    assert client.get("/api/compare", params={"a": a, "b": b}).json()["shared_cases"] == 36


def test_streamed_body_over_the_limit_is_413(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, max_body_bytes=1000, auto_migrate=False))

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b'{"trajectories": [' + b" " * 200

    with TestClient(app) as c:
        r = c.post("/api/runs/1/trajectories", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "larger than 1000" in r.json()["error"]
        small = c.post("/api/runs", content=iter([b'{"name": "x"}']), headers={"content-type": "application/json"})
        assert small.status_code == 422  # a streamed body under the limit reaches the app


def test_compare_reads_changes_with_the_interval_of_the_difference(client: TestClient) -> None:
    a, b = new_run(client, "a", "v1"), new_run(client, "b", "v2")
    ingest(client, a, records("v1"))
    ingest(client, b, records("v2"))
    fam = {f["family"]: f for f in client.get("/api/compare", params={"a": a, "b": b}).json()["families"]}
    assert fam["selection_recall"]["reads_as"] == "better"  # 59/69 -> 67/69: the interval excludes 0
    assert fam["recovery"]["reads_as"] == "within noise"  # 2/6 -> 2/6
    assert fam["hallucinated_tools"]["reads_as"] == "within noise"  # 2/79 -> 0/71
    lo, hi = fam["selection_recall"]["delta_ci"]
    assert 0 < lo < hi
    # the call-level diff pairs calls by tool, not by position
    flip = next(
        f
        for f in client.get("/api/compare", params={"a": a, "b": b}).json()["flipped"]
        if f["case_id"] == "saldo-001" and f["trial"] == 1
    )
    pair = client.get("/api/compare/trajectories", params={"a": flip["a_trajectory"], "b": flip["b_trajectory"]})
    names = [(r["a"]["name"] if r["a"] else None, r["b"]["name"] if r["b"] else None) for r in pair.json()["rows"]]
    assert names[0] == ("buscar_cliente", "buscar_cliente")
    assert all(x == y or None in (x, y) for x, y in names)
