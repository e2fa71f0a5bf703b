"""Whatever is stored can be read back: the hostile records of tests/hostile.py go in
through every write path (API, labels, OTLP, `toollens import`) under one rule (NUL and
lone surrogates read as U+FFFD), then every GET of the API and every page answers
without a 5xx, on SQLite and PostgreSQL. What the rule refuses is a 422 naming the field."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.core.records import MAX_DEPTH
from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app
from tests.hostile import BAD, EXAMPLES, STORED, nested, post_json, store_hostile


def _get_urls(client: TestClient, ids: dict[str, int]) -> dict[str, list[str]]:
    """Per GET path of the API schema, the URLs that read what the hostile records made."""
    runs = [ids["run"], ids["otlp_run"], ids["imported_run"]]
    trajectories = [t["id"] for r in runs for t in client.get(f"/api/runs/{r}/trajectories").json()["data"]]
    (toolset,) = client.get("/api/toolsets").json()
    name, version = toolset["name"], toolset["versions"][0]["hash"]
    a, b = trajectories[0], trajectories[-1]
    per_run = ["", "/trajectories", "/figures", "/confusion", "/lint", "/trajectories.jsonl", "/health", "/blame"]
    urls: dict[str, list[str]] = {
        "/api/health": ["/api/health"],
        "/api/runs": ["/api/runs", "/api/runs?model=ma%00b%EF%BF%BDc%EF%BF%BD", "/api/runs?suite=%00"],
        "/api/trajectories/{trajectory_id}": [f"/api/trajectories/{t}" for t in trajectories],
        "/api/trajectories/{trajectory_id}/labels": [f"/api/trajectories/{t}/labels" for t in trajectories],
        "/api/compare": [f"/api/compare?a={x}&b={y}" for x in runs for y in runs],
        "/api/compare/trajectories": [f"/api/compare/trajectories?a={a}&b={b}"],
        "/api/toolsets": ["/api/toolsets"],
        "/api/toolsets/{name}": [f"/api/toolsets/{name}"],
        "/api/toolsets/{name}/diff": [f"/api/toolsets/{name}/diff?a={version}&b={version}"],
        "/api/toolsets/{name}/versions": [f"/api/toolsets/{name}/versions?a={version}&b={version}"],
        "/api/toolsets/{name}/lint": [f"/api/toolsets/{name}/lint?version={version}"],
        "/api/suites": ["/api/suites"],
        "/api/suites/{suite_id}": [f"/api/suites/{s['id']}" for s in client.get("/api/suites").json()],
    }
    for suffix in per_run:
        urls["/api/runs/{run_id}" + suffix] = [f"/api/runs/{r}{suffix}" for r in runs]
    urls["/api/runs/{run_id}/trajectories"] += [f"/api/runs/{r}/trajectories?case_id=x%00&called=t%00" for r in runs]
    urls["pages"] = [
        "/",
        *[f"/runs/{r}" for r in runs],
        *[f"/trajectories/{t}" for t in trajectories],
        f"/compare?a={runs[0]}&b={runs[2]}",
        f"/compare/trajectories?a={a}&b={b}",
        f"/toolsets/{name}",
    ]
    return urls


def test_hostile_records_are_stored_by_one_rule_and_read_back_everywhere(db_url: str, tmp_path: Path) -> None:
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with TestClient(app) as client:
        ids = store_hostile(client, db_url, tmp_path)
        # a hostile trajectory curated into its suite: the case's id, question and mocks by the same rule
        run = client.get(f"/api/runs/{ids['run']}").json()
        first = client.get(f"/api/runs/{ids['run']}/trajectories").json()["data"][0]["id"]
        added = post_json(client, f"/api/suites/{run['suite_id']}/cases", {"trajectory_id": first, "case_id": BAD})
        assert added.status_code == 201, added.text
        case = client.get(f"/api/suites/{added.json()['suite']['id']}").json()["document"]["cases"][-1]
        assert case["id"] == STORED and not _unstorable(case)
        urls = _get_urls(client, ids)
        assert {p for p, ops in app.openapi()["paths"].items() if "get" in ops} == set(urls) - {"pages"}
        for url in [u for group in urls.values() for u in group]:
            r = client.get(url)
            assert r.status_code == 200, (url, r.status_code, r.text[:300])
        r = client.get("/api/toolsets/x%00")  # a NUL in a path: read as U+FFFD, on PostgreSQL too
        assert r.status_code == 404 and "x\ufffd" in r.json()["error"]
        # what the rule made of them, read back the same on SQLite and PostgreSQL
        run = client.get(f"/api/runs/{ids['run']}").json()
        assert (run["name"], run["agent"], run["model"]) == ("hostile" + STORED, STORED, "m" + STORED)
        assert run["config"][STORED] == STORED
        found = client.get("/api/runs?model=ma%00b%EF%BF%BDc%EF%BF%BD").json()["data"]  # a NUL filter: U+FFFD
        assert [r["id"] for r in found] == [ids["run"]]
        for run_id in (ids["run"], ids["imported_run"]):
            record = client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()[0]
            assert STORED in record and not _unstorable(json.loads(record))
            first = client.get(f"/api/runs/{run_id}/trajectories").json()["data"][0]["id"]
            traj = client.get(f"/api/trajectories/{first}").json()
            assert (traj["question"], traj["answer"]) == (STORED, STORED)
            assert traj["calls"][0]["arguments"][STORED] == STORED and traj["calls"][1]["name"] == "tool" + STORED
        labels = client.get(f"/api/trajectories/{ids['trajectory']}/labels").json()
        assert STORED in str(labels)
        otlp = client.get(f"/api/runs/{ids['otlp_run']}/trajectories.jsonl").text
        assert STORED in otlp and not _unstorable(json.loads(otlp))


def _unstorable(value: Any) -> bool:
    """Whether a decoded JSON value holds a NUL or a lone surrogate anywhere."""
    if isinstance(value, str):
        return re.search("[\x00\ud800-\udfff]", value) is not None
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    return isinstance(value, list) and any(_unstorable(v) for v in value)


def test_what_the_rule_refuses_is_a_422_naming_the_field(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
    case = doc["cases"][0]["id"]
    with TestClient(app) as client:
        run = post_json(client, "/api/runs", {"name": "r", "suite": doc}).json()["id"]
        refused: list[tuple[dict[str, Any], str]] = [
            ({"case_id": case, "calls": [{"name": "x", "arguments": {"a": nested(300)}}]}, "calls[0].arguments"),
            ({"case_id": case, "calls": [{"name": "x", "arguments": {"a": nested(600)}}]}, "calls[0].arguments"),
            ({"case_id": case, "state": {"s": nested(MAX_DEPTH)}}, "state"),
            ({"case_id": "no-such-case"}, "case_id"),
            ({"case_id": case, "answer": "x", "reward": 1}, ""),  # a control: this one is stored
        ]
        for record, field in refused:
            r = post_json(client, f"/api/runs/{run}/trajectories", {"trajectories": [record]})
            if not field:
                assert r.status_code == 200, r.text
                continue
            assert r.status_code == 422, (field, r.text)
            assert r.json()["detail"][0]["field"] == field, r.json()
        for literal in ("NaN", "Infinity", "-Infinity", "1e999"):  # what JSON parsers of other languages send
            body = f'{{"trajectories": [{{"case_id": "{case}", "trial": 9, "reward": {literal}}}]}}'
            r = client.post(f"/api/runs/{run}/trajectories", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "reward", (literal, r.text)
        r = client.post(
            "/api/runs",
            content='{"name": "c", "suite_id": 1, "config": {"x": NaN}}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "config", r.text
        r = post_json(client, "/api/runs", {"name": "d", "suite_id": 1, "config": {"x": nested(MAX_DEPTH)}})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "config", r.text
        # the two shapes the schema used to accept: now refused by both
        schema = app.openapi()["components"]["schemas"]
        assert {"required": ["suite"], "properties": {"suite": {"type": "object"}}} in schema["RunCreate"]["oneOf"]
        assert client.post("/api/runs", json={"name": "0", "suite": None}).status_code == 422
        assert "case_id" in schema["TrajectoryBatch"]["properties"]["trajectories"]["items"]["required"]
        r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": [{"answer": "x"}]})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "case_id"
        assert client.get(f"/api/runs/{run}").json()["trajectories"] == 1  # the control alone
        assert BAD  # (the hostile strings themselves are stored, not refused: see the test above)
