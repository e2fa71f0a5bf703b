"""Blame over real HTTP (uvicorn on a loopback port): a τ² results file of our
own imported twice (two models), then the run page's figures, column and
filter, the API's filter and /blame, the trajectory page's first screen, and
compare and gate refusing a verdict the simulated user explains."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.settings import Settings
from app.web.app import create_app
from tests.servers import serve_in_thread

runner = CliRunner()
INSTRUCTIONS = {
    "known_info": "You are ana_lima_4410.",
    "reason_for_call": "Cancel order #W7000001.",
    "task_instructions": "If asked, the reason is: no longer needed.",
}


def msg(role: str, content: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": calls}


def cancel(order: str) -> list[dict[str, Any]]:
    return [
        msg(
            "assistant",
            None,
            [
                {
                    "id": "a1",
                    "name": "cancel_order",
                    "requestor": "assistant",
                    "arguments": {"order_id": order, "reason": "no longer needed"},
                }
            ],
        ),
        {"id": "a1", "role": "tool", "content": '{"status": "cancelled"}', "requestor": "assistant"},
    ]


OPEN = [
    msg("assistant", "Hi! How can I help?"),
    msg("user", "Hello, I am ana_lima_4410."),
    msg("assistant", "What can I do for you?"),
]
PASSES = [
    *OPEN,
    msg("user", "Cancel #W7000001, it is no longer needed."),
    *cancel("#W7000001"),
    msg("assistant", "Done."),
    msg("user", "Thanks! ###STOP###"),
]
USER_QUITS = [
    *OPEN,
    msg("user", "Cancel #W7000001 <b>now</b>, it is no longer needed."),
    msg("assistant", "Sure, one moment."),
    msg("user", "###TRANSFER###"),
]
AGENT_WRONG = [
    *OPEN,
    msg("user", "Cancel #W7000001, it is no longer needed."),
    *cancel("#W7000009"),
    msg("assistant", "Done."),
    msg("user", "Thanks! ###STOP###"),
]


def results(path: Path, model: str, sims: dict[str, tuple[list[dict[str, Any]], float]]) -> Path:
    tasks = [
        {
            "id": t,
            "user_scenario": {"instructions": INSTRUCTIONS},
            "evaluation_criteria": {
                "actions": [
                    {
                        "action_id": f"{t}0",
                        "requestor": "assistant",
                        "name": "cancel_order",
                        "arguments": {"order_id": "#W7000001", "reason": "no longer needed"},
                    }
                ]
            },
        }
        for t in sims
    ]
    doc = {
        "info": {"agent_info": {"llm": model}, "environment_info": {"domain_name": "shop"}},
        "tasks": tasks,
        "simulations": [
            {"id": f"s-{t}", "task_id": t, "trial": 0, "messages": m, "reward_info": {"reward": r}}
            for t, (m, r) in sims.items()
        ],
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture()
def served(db_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    base_sims = {"ok": (PASSES, 1.0), "quits": (USER_QUITS, 0.0), "wrong": (AGENT_WRONG, 0.0)}
    cand_sims = {"ok": (USER_QUITS, 0.0), "quits": (USER_QUITS, 0.0), "wrong": (AGENT_WRONG, 0.0)}
    for name, model, sims in (("base", "model-a", base_sims), ("cand", "model-b", cand_sims)):
        r = runner.invoke(
            cli,
            [
                "import",
                str(results(tmp_path / f"{name}.json", model, sims)),
                "--format",
                "tau2",
                "--run",
                name,
                "--model",
                model,
                "--db",
                db_url,
            ],
        )
        assert r.exit_code == 0, r.output
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:
        yield base, db_url


def test_run_figures_column_filter_and_trajectory_page(served: tuple[str, str]) -> None:
    base, _ = served
    with httpx.Client(base_url=base, timeout=30) as http:
        runs = {r["name"]: r["id"] for r in http.get("/api/runs").json()["data"]}
        rid = runs["base"]
        figures = http.get(f"/api/runs/{rid}/blame").json()
        # "wrong" fails in both runs, of two models: the task's, not the agent's
        assert figures["by_blame"] == {"agent": 0, "user": 1, "task": 1}
        assert (figures["scored"], figures["passed"]) == (3, 1)
        assert figures["pass_rate"] == pytest.approx(1 / 3) and figures["pass_rate_agent_only"] == 1.0
        # both fail everywhere; "quits" stays the user's (only an agent blame moves to the task)
        assert figures["every_model_fails"] == ["quits", "wrong"] and figures["models_compared"] == 2
        rows = http.get(f"/api/runs/{rid}/trajectories", params={"blame": "user"}).json()
        assert [(t["case_id"], t["blame"], t["blame_confidence"]) for t in rows["data"]] == [("quits", "user", 0.85)]
        assert rows["count"] == 1
        task = http.get(f"/api/runs/{rid}/trajectories", params={"blame": "task"}).json()["data"]
        assert [(t["case_id"], t["blame"]) for t in task] == [("wrong", "agent")]  # stored agent, counted task
        assert http.get(f"/api/runs/{rid}/trajectories", params={"blame": "nobody"}).status_code == 422
        cases = {c["case_id"]: c for c in http.get(f"/api/runs/{rid}/figures").json()["cases"]}  # as score --json
        assert (cases["quits"]["blame"], cases["quits"]["blame_confidence"]) == ("user", 0.85)
        assert cases["quits"]["blame_evidence"] == (
            'the user ends with ###TRANSFER### though the agent never transferred: "###TRANSFER###"'
        )
        assert "blame" not in cases["ok"]
        # the stored counters, as score --json counts them: every-model-fails is the store's (/blame above)
        assert http.get(f"/api/runs/{rid}/figures").json()["blame"] == {"agent": 1, "user": 1, "task": 0}

        page = http.get(f"/runs/{rid}").text
        assert "failed conversations by blame" in page
        assert 'href="?blame=user#trajectories">user <b>1</b></a>' in page
        assert "pass rate without the 2 blamed on the simulated user or the task:" in page
        assert "<b>100.0%</b>" in page and "(1 of 1)" in page
        assert '<span class="badge blame-user" title="confidence 0.85">user</span>' in page
        filtered = http.get(f"/runs/{rid}", params={"blame": "user"}).text
        listed = filtered.split('id="trajectory-list"')[1]
        assert ">quits</a>" in listed and ">wrong</a>" not in listed and ">ok</a>" not in listed

        tid = rows["data"][0]["id"]
        traj = http.get(f"/trajectories/{tid}").text
        first_screen = traj.split('id="why"')[0]  # before the failure's explanation and the timeline
        assert 'id="blame"' in first_screen and "the simulated user" in first_screen
        assert "confidence 0.85" in first_screen and "<code>early_stop</code>" in first_screen
        assert "the user ends with ###TRANSFER### though the agent never transferred" in first_screen
        assert '<blockquote class="blame-quote">###TRANSFER###</blockquote>' in first_screen
        assert "&lt;b&gt;now&lt;/b&gt;" in traj and "<b>now</b>" not in traj  # what the user said, escaped
        passed_id = http.get(f"/api/runs/{rid}/trajectories", params={"passed": "true"}).json()["data"][0]["id"]
        assert 'id="blame"' not in http.get(f"/trajectories/{passed_id}").text


def test_compare_and_gate_give_no_verdict_the_simulator_explains(served: tuple[str, str]) -> None:
    base, db_url = served
    with httpx.Client(base_url=base, timeout=30) as http:
        ids = {r["name"]: r["id"] for r in http.get("/api/runs").json()["data"]}
        c = http.get("/api/compare", params={"a": ids["base"], "b": ids["cand"]}).json()
        assert [f["case_id"] for f in c["flipped"]] == ["ok"] and c["flipped_blamed_on_user"] == 1
        assert c["simulator_note"].startswith(
            "1 of the 1 failures this change turns on or off (100%) are blamed on the simulated user"
        )
        page = http.get("/compare", params={"a": ids["base"], "b": ids["cand"]}).text
        assert 'id="simulator-note"' in page and "no verdict: 1 of the 1 failures" in page
    r = runner.invoke(cli, ["gate", "--baseline", "base", "--candidate", "cand", "--db", db_url])
    assert r.exit_code == 3, r.output
    assert "gate NO VERDICT: base -> cand" in r.output and "simulator: 1 of the 1 failures" in r.output


def test_every_model_fails_needs_two_models_on_the_case_itself(db_url: str, tmp_path: Path) -> None:
    """Two runs of model-a fail "wrong"; model-b ran only "ok": "wrong" was never tried by a
    second model, so it stays the agent's, though the suite has runs of two models."""
    from sqlalchemy import select

    from app.store.blame import every_model_fails
    from app.store.db import make_engine, make_sessionmaker
    from app.store.models import Run

    wrong_only = {"wrong": (AGENT_WRONG, 0.0)}
    for name, model, sims in (
        ("a1", "model-a", wrong_only),
        ("a2", "model-a", wrong_only),
        ("b", "model-b", {"ok": (PASSES, 1.0)}),
    ):
        path = results(tmp_path / f"{name}.json", model, sims)
        args = ["import", str(path), "--format", "tau2", "--run", name, "--model", model, "--db", db_url]
        r = runner.invoke(cli, args)
        assert r.exit_code == 0, r.output
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            ids = dict(session.execute(select(Run.name, Run.id)).all())
            # before: (["wrong"], 3, 2), two runs of one model counted as "every model"
            assert every_model_fails(session, ids["a1"]) == ([], 3, 2)
    finally:
        engine.dispose()


def test_compare_page_gives_no_mcnemar_verdict_the_simulator_explains(db_url: str, tmp_path: Path) -> None:
    """Ten cases pass in A and fail in B, 2 of them because the user quit (20% > 10%): McNemar's
    p = 2 / 2**10 = 0.00195 would read "unlikely to be noise", but the page gives no verdict,
    in the head and in the McNemar line alike."""
    sims = {
        "a": {f"c{i}": (PASSES, 1.0) for i in range(10)},
        "b": {f"c{i}": (USER_QUITS if i < 2 else AGENT_WRONG, 0.0) for i in range(10)},
    }
    for name, s in sims.items():
        args = ["import", str(results(tmp_path / f"{name}.json", "m", s)), "--format", "tau2", "--run", name]
        r = runner.invoke(cli, [*args, "--db", db_url])
        assert r.exit_code == 0, r.output
    with (
        serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base,
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        ids = {r["name"]: r["id"] for r in http.get("/api/runs").json()["data"]}
        c = http.get("/api/compare", params={"a": ids["a"], "b": ids["b"]}).json()
        assert c["mcnemar"]["p_value"] == pytest.approx(0.001953125)
        assert c["simulator_note"].startswith("2 of the 10 failures this change turns on or off (20%)")
        page = http.get("/compare", params={"a": ids["a"], "b": ids["b"]}).text
        line = page.split('<p class="mcnemar">')[1].split("</p>")[0]
        assert "10 passed only in A, 0 only in B" in line and "0.001953" in line
        assert "unlikely to be noise" not in page and "no verdict: the simulated user" in line
        # the share is a setting, as gate.yaml's simulator_share: at 25%, 2 of 10 flips give a verdict
        loose = {"a": ids["a"], "b": ids["b"], "simulator_share": 0.25}
        assert http.get("/api/compare", params=loose).json()["simulator_note"] is None
        assert "unlikely to be noise" in http.get("/compare", params=loose).text
        strict = http.get("/api/compare", params={**loose, "simulator_share": 0.15}).json()["simulator_note"]
        assert "above the 15% allowed" in strict
        assert http.get("/api/compare", params={**loose, "simulator_share": 1.5}).status_code == 422
