"""The trajectory page over the example run (banca v1): each expected step
once, calls counted from 1, error texts as the agent saw them, the previous
and next failing trajectory, the final state only where a case declares one.
Real HTTP, both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.suites.schema import ArgumentValidator
from tests.factories import examples_client

HTML = {"accept": "text/html"}


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "v1") as c:
        yield c


def trajectory(c: TestClient, case_id: str, trial: int) -> int:
    data = c.get("/api/runs/1/trajectories", params={"case_id": case_id, "limit": 50}).json()["data"]
    return int(next(t["id"] for t in data if t["trial"] == trial))


def expected_labels(text: str) -> list[str]:
    return re.findall(r'<span class="k"[^>]*>expected #(\d+)</span>', text)


def test_a_wrong_tool_shows_its_expected_step_once(client: TestClient) -> None:
    # pedido-001 trial 1: buscar_producto called where buscar_pedido (step 1) was expected, never done
    text = client.get(f"/trajectories/{trajectory(client, 'pedido-001', 1)}", headers=HTML).text
    assert expected_labels(text) == ["1"]
    assert "missing step" not in text
    assert "expected step #1 never done" in text and "wrong tool" in text
    # saldo-001 trial 1: ver_saldo fails its schema, then is retried: step 2 is shown once, the retry says so
    text = client.get(f"/trajectories/{trajectory(client, 'saldo-001', 1)}", headers=HTML).text
    assert expected_labels(text) == ["1", "2"]
    assert "expected #2, again (shown above)" in text


def test_error_texts_read_as_the_agent_saw_them(client: TestClient) -> None:
    text = client.get(f"/trajectories/{trajectory(client, 'saldo-002', 0)}", headers=HTML).text
    assert "does not match pattern &#39;^\\d{7,8}-[\\dkK]$&#39;" in text
    assert "\\\\d" not in text
    validator = ArgumentValidator(
        {"type": "object", "properties": {"id": {"type": "string", "pattern": r"^PED-\d{5}$"}}}
    )
    violation = validator.validate({"id": "x"})
    assert violation is not None and violation.message == "field 'id': 'x' does not match pattern '^PED-\\d{5}$'"


def test_previous_and_next_failing(client: TestClient) -> None:
    failing = [
        t["id"] for t in client.get("/api/runs/1/trajectories", params={"passed": "false", "limit": 100}).json()["data"]
    ]
    middle = failing[3]
    text = client.get(f"/trajectories/{middle}", headers=HTML).text
    assert f'href="/trajectories/{failing[2]}" rel="prev"' in text
    assert f'href="/trajectories/{failing[4]}" rel="next"' in text
    first = client.get(f"/trajectories/{failing[0]}", headers=HTML).text
    assert 'rel="prev"' not in first and f'href="/trajectories/{failing[1]}" rel="next"' in first


def test_final_state_only_where_declared(client: TestClient) -> None:
    undeclared = client.get(f"/trajectories/{trajectory(client, 'saldo-001', 0)}", headers=HTML).text
    assert 'id="final-state"' not in undeclared and "No state recorded" not in undeclared
    # nota-002 trial 1 declares a state and leaves another amount: a labelled expected-vs-got table
    text = client.get(f"/trajectories/{trajectory(client, 'nota-002', 1)}", headers=HTML).text
    block = re.search(r'<div id="final-state">(.*?)</div>', text, re.S)
    assert block is not None
    assert '<th scope="col">key</th><th scope="col">expected</th><th scope="col">got</th>' in block.group(1)


def test_faulted_call_chart_counts_calls_from_one(client: TestClient) -> None:
    text = client.get("/runs/1", headers=HTML).text
    fig = json.loads(
        re.search(r'<script type="application/json" id="outcomes-step-data">(.*?)</script>', text, re.S).group(1)
    )  # type: ignore[union-attr]
    assert fig["data"][0]["x"] == ["call #1", "call #2", "call #3"]
