"""Hostile records stored through every write path (API, labels, OTLP, `toollens import`),
for tests that read everything back: NUL and lone surrogates in every kind of string,
JSON nested to the bound, numbers at the edges. What the app stores of them is
checked in tests/web/test_hostile_records.py; the API fuzz runs on a database holding them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.core.records import MAX_DEPTH
from app.core.suites.suite import load_suite_document

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BAD = "a\x00b\ud800c\udfff"  # NUL and two lone surrogates
STORED = "a\ufffdb\ufffdc\ufffd"  # what the rule makes of them


def nested(levels: int, leaf: Any = 1) -> Any:
    for _ in range(levels):
        leaf = [leaf]
    return leaf


def dumps(value: Any) -> bytes:
    """JSON with lone surrogates escaped (``\\ud800``), as a client in any language may send them."""
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def hostile_record(case_id: str, trial: int = 0) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "trial": trial,
        "question": BAD,
        "answer": BAD,
        "stopped": "s\x00",
        "reward": 10**200,
        "calls": [
            {
                "name": "buscar_cliente",
                "arguments": {BAD: BAD, "deep": nested(MAX_DEPTH - 2, BAD)},
                "observation": BAD,
                "error": {"kind": BAD, "message": BAD},
            },
            {"name": f"tool{BAD}", "arguments": json.dumps({"q": BAD}), "observation": {"x": BAD}},
        ],
        "state": {BAD: [BAD, 2**70]},
    }


def post_json(client: TestClient, path: str, value: Any) -> Any:
    return client.post(path, content=dumps(value), headers={"content-type": "application/json"})


def otlp_hostile(case_id: str) -> dict[str, Any]:
    def attr(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    trace = "7b8efff798038103d269b633813fc60d"
    tool = {
        "traceId": trace,
        "spanId": "02",
        "parentSpanId": "01",
        "name": f"execute_tool {BAD}",
        "startTimeUnixNano": "20",
        "endTimeUnixNano": "21",
        "attributes": [
            attr("gen_ai.operation.name", "execute_tool"),
            attr("gen_ai.tool.name", "ver_saldo"),
            attr("gen_ai.tool.call.arguments", json.dumps({"id": BAD})),
            attr("gen_ai.tool.call.result", BAD),
        ],
        "status": {"code": 2, "message": BAD},
    }
    root = {
        "traceId": trace,
        "spanId": "01",
        "parentSpanId": "",
        "name": BAD,
        "startTimeUnixNano": "10",
        "endTimeUnixNano": "30",
        "attributes": [
            attr("toollens.case_id", case_id),
            attr("input.value", BAD),
            attr("output.value", BAD),
            attr(BAD, BAD),
        ],
    }
    return {
        "resourceSpans": [
            {"resource": {"attributes": [attr("service.name", BAD)]}, "scopeSpans": [{"spans": [tool, root]}]}
        ]
    }


def store_hostile(client: TestClient, db_url: str, tmp: Path) -> dict[str, int]:
    """Store the hostile records through every write path; the ids made (run and trajectory ids)."""
    doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
    cases = [c["id"] for c in doc["cases"]]
    r = post_json(
        client,
        "/api/runs",
        {
            "name": f"hostile{BAD}",
            "agent": BAD,
            "model": f"m{BAD}",
            "suite": doc,
            "config": {BAD: BAD, "deep": nested(MAX_DEPTH - 1)},
        },
    )
    assert r.status_code == 201, r.text
    run = r.json()["id"]
    r = post_json(
        client,
        f"/api/runs/{run}/trajectories",
        {"trajectories": [hostile_record(cases[0]), hostile_record(cases[1], trial=3)]},
    )
    assert r.status_code == 200, r.text
    trajectories = client.get(f"/api/runs/{run}/trajectories").json()["data"]
    first = trajectories[0]["id"]
    r = post_json(client, f"/api/trajectories/{first}/labels", {"label": "confused", "author": BAD, "reason": BAD})
    assert r.status_code == 201, r.text
    form = "label=gave_up&author=a%00b&reason=%ED%A0%80x%00"  # a lone surrogate's UTF-8 bytes: not UTF-8
    r = client.post(
        f"/trajectories/{trajectories[1]['id']}/label",
        content=form,
        follow_redirects=False,
        headers={"content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin"},
    )
    assert r.status_code == 303 and "label_error" not in r.headers["location"], r.headers
    # the OTLP receiver, into a run of its own
    r = post_json(client, "/api/runs", {"name": "otlp", "suite": doc})
    assert r.status_code == 201, r.text
    otlp_run = r.json()["id"]
    r = client.post(
        "/v1/traces?run=otlp", content=dumps(otlp_hostile(cases[2])), headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    client.app.state.otlp.store_ready(everything=True)  # type: ignore[attr-defined]
    assert client.get("/v1/traces/status").json()["stored_traces"] == 1
    # `toollens import` of a JSONL file written with the same records
    src = tmp / "hostile.jsonl"
    src.write_bytes(b"\n".join(dumps(hostile_record(c)) for c in cases[:3]) + b"\n")
    result = CliRunner().invoke(
        cli, ["import", str(src), "--suite", str(EXAMPLES / "suite_v1.yaml"), "--run", "imported", "--db", db_url]
    )
    assert result.exit_code == 0, result.output
    imported = client.get("/api/runs", params={"limit": 200}).json()["data"]
    imported_run = next(x["id"] for x in imported if x["name"] == "imported")
    return {"run": run, "otlp_run": otlp_run, "imported_run": imported_run, "trajectory": first}
