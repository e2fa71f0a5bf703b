"""The OpenTelemetry instrumentations people run, for real: each drives the
``openai`` SDK (a plain chat-completions loop, or the OpenAI Agents SDK)
against a scripted model server, in its own process (tests/instrumented_agent.py),
and exports to the app's ``POST /v1/traces``. Every emitter must yield the
same trajectory: the calls, their arguments and order, the tool error, the
answer. The packages are the dev extras; the contrib Agents instrumentation
(whose module Traceloop's overwrites) is installed apart, into a folder put
first on the process's ``PYTHONPATH``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from app.store.db import upgrade
from app.web.app import create_app
from tests.fake_llm import FakeLLM, Turn
from tests.fake_llm import serve as serve_llm
from tests.instrumented_agent import ANSWER, QUESTION, TOOLS
from tests.servers import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
MODULES = {
    "openai-v2": "opentelemetry.instrumentation.openai_v2",
    "openinference": "openinference.instrumentation.openai",
    "traceloop": "traceloop.sdk",
    "agents-openinference": "openinference.instrumentation.openai_agents",
}
CONTRIB = "opentelemetry-instrumentation-openai-agents-v2==0.1.0"
EXPECTED = [
    ("buscar_cliente", {"rut": "12345678-9"}, None),
    ("ver_saldo", {"id": "8812"}, "Error: id must be an integer"),
    ("ver_saldo", {"id": 8812}, None),
]
SUITE = {
    "name": "banca",
    "cases": [],
    "toolset": {
        "name": "banca",
        "tools": [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],  # type: ignore[index]
                "parameters": t["function"]["parameters"],
            }
            for t in TOOLS
        ],
    },
}  # type: ignore[index]


def _missing(module: str) -> str | None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if found:
        return None
    reason = f"{module} is not installed (the dev extras: pip install -e '.[dev]')"
    if os.environ.get("CI"):
        pytest.fail(reason)
    return reason


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Any]]:
    """The app (SQLite) and the scripted model, each on a loopback port."""
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'toollens.db'}"
    upgrade(url)
    llm = FakeLLM(
        scripts={
            QUESTION: [
                Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})]),
                Turn(calls=[("ver_saldo", {"id": "8812"})]),
                Turn(calls=[("ver_saldo", {"id": 8812})]),
                Turn(text=ANSWER),
            ]
        }
    )
    app = create_app(Settings(database_url=url, auto_migrate=False))
    with serve_llm(llm) as model, serve_in_thread(app) as base:
        yield base, f"{model}/v1", app


def run_agent(
    served: tuple[str, str, Any], emitter: str, run: str, *args: str, query: str = "", pythonpath: str = ""
) -> list[dict[str, Any]]:
    """Run the instrumented agent into a new run; the run's stored trajectories."""
    base, model, app = served
    r = httpx.post(f"{base}/api/runs", json={"name": run, "suite": SUITE})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.instrumented_agent", emitter, model, f"{base}/v1/traces?run={run}{query}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stderr[-3000:])  # shown if the test fails: what the instrumentation or its exporter said
    app.state.otlp.store_ready(everything=True)  # every span is in (exported as each span ended)
    deadline = time.monotonic() + 20
    while True:
        text = httpx.get(f"{base}/api/runs/{run_id}/trajectories.jsonl").text
        if text.strip() or time.monotonic() > deadline:
            return [json.loads(line) for line in text.splitlines()]
        time.sleep(0.1)


def assert_the_banking_trajectory(records: list[dict[str, Any]]) -> None:
    (record,) = records
    calls = [
        (
            c["name"],
            json.loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"],
            c["error"]["message"] if c["error"] else None,
        )
        for c in record["calls"]
    ]
    assert calls == EXPECTED
    assert [c["observation"] for c in record["calls"]] == [
        '{"id": 8812}',
        "Error: id must be an integer",
        '{"saldo": 142900}',
    ]
    assert record["question"] == QUESTION
    assert record["answer"] == ANSWER


@pytest.mark.parametrize("emitter", list(MODULES))
def test_each_instrumentation_yields_the_same_trajectory(served: tuple[str, str, Any], emitter: str) -> None:
    reason = _missing(MODULES[emitter])
    if reason:
        pytest.skip(reason)
    assert_the_banking_trajectory(run_agent(served, emitter, emitter))


def test_a_plain_loop_without_a_span_around_it_is_one_trajectory_per_session(served: tuple[str, str, Any]) -> None:
    """Each model call is a trace of its own; OpenInference's ``using_session`` puts
    ``session.id`` on each, and ``?group_by=session.id`` makes them one trajectory."""
    reason = _missing(MODULES["openinference"])
    if reason:
        pytest.skip(reason)
    app = served[2]
    app.state.otlp.idle = 0.5  # a conversation has no root: it is complete once quiet for `idle`
    records = run_agent(served, "openinference", "sesiones", "--no-wrap", query="&group_by=session.id")
    assert_the_banking_trajectory(records)
    assert records[0]["case_id"] == "conversacion-1"


def test_the_contrib_agents_instrumentation_installed_apart(
    served: tuple[str, str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``opentelemetry-instrumentation-openai-agents-v2`` ships the module
    ``opentelemetry.instrumentation.openai_agents``, as Traceloop's
    ``opentelemetry-instrumentation-openai-agents`` does: one venv holds one of them."""
    reason = _missing("agents")
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("contrib")
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(folder),
            CONTRIB,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if pip.returncode != 0:
        reason = f"{CONTRIB} could not be installed: {pip.stderr.strip()[-300:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    assert_the_banking_trajectory(run_agent(served, "agents-contrib", "contrib", pythonpath=str(folder)))
