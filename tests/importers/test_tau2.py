"""``--from tau2``: τ²-bench results files. A small file of our own for each
rule (several calls in a message, the two ways a tool error is written, the
simulated user's own calls, keys in ``info``, refusals), then the real
telecom run of the shared data, its figures counted from the file itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import Trajectory
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import parse_suite
from app.importers import Options, convert
from app.settings import Settings
from app.web.app import create_app
from tests.resources import DATA, shared_data

TELECOM = DATA / "tau2" / "gpt-4o_telecom_pr17.json"
SECRET = "sk-test-4f1a9c-never-shown"
runner = CliRunner()


def msg(
    role: str, content: str | None = None, calls: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": calls, **extra}


def call(cid: str, name: str, requestor: str = "assistant", **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments, "requestor": requestor}


def result(cid: str, content: str, requestor: str = "assistant", **extra: Any) -> dict[str, Any]:
    return {"id": cid, "role": "tool", "content": content, "requestor": requestor, **extra}


USAGE = {"prompt_tokens": 1000, "completion_tokens": 20}
SIM_A = {
    "id": "s1",
    "task_id": "t1",
    "trial": 0,
    "termination_reason": "user_stop",
    "agent_cost": 0.01,
    "user_cost": 0.002,
    "reward_info": {"reward": 1.0},
    "messages": [
        msg("assistant", "Hi! How can I help you today?"),
        msg("user", "My data is slow. I am John, 555-0101."),
        msg("assistant", "Let me look you up.", [call("a1", "get_customer", phone="555-0101")], usage=USAGE),
        result("a1", '{"customer_id": "C1"}', error=False),
        msg(
            "assistant", None, [call("a2", "get_line", line_id="L1"), call("a3", "get_plan", plan_id="P9")], usage=USAGE
        ),
        result("a2", "line L1 is suspended", error=True),
        result("a3", "Error: plan P9 not found"),  # no error field: the text says it
        msg("assistant", "Please turn roaming on.", usage=USAGE),
        msg("user", None, [call("u1", "toggle_roaming", requestor="user")], usage=USAGE),
        result("u1", "Roaming is now ON", requestor="user", error=False),
        msg("user", "Done, roaming is on."),
        msg("assistant", "Great, you are all set.", usage={"prompt_tokens": 1200, "completion_tokens": 8}),
    ],
}
SIM_B = {
    "id": "s2",
    "task_id": "t1",
    "trial": 1,
    "termination_reason": "max_steps",
    "reward_info": {"reward": 0.0},
    "messages": [
        msg("user", "My data is slow."),
        msg("assistant", None, [call("b1", "get_customer", phone="x")]),
        result("b1", "Error - customer x not found"),
        msg("assistant", None, [call("b2", "get_customer", phone="555")]),
        result("b2", "Errors on this line: none"),  # the word "Errors", not an error
        msg("assistant", "Sorry."),
    ],
}
SIM_C = {
    "id": "s3",
    "task_id": "t2",
    "trial": 0,
    "termination_reason": "agent_stop",
    "reward_info": None,
    "messages": [
        msg("user", "Pay my bill."),
        msg("assistant", None, [call("c1", "send_payment_request", bill_id="B1")]),
        {"id": "c1", "role": "tool", "content": '{"sent": true}'},  # no requestor, no error
        msg("assistant", "Request sent."),
    ],
}
TASKS = [
    {
        "id": "t1",
        "user_scenario": {"instructions": {"reason_for_call": "slow data"}},
        "evaluation_criteria": {
            "actions": [
                {
                    "action_id": "x",
                    "requestor": "assistant",
                    "name": "get_line",
                    "arguments": {"line_id": "L1", "note": "ignored"},
                    "compare_args": ["line_id"],
                },
                {"action_id": "y", "requestor": "user", "name": "toggle_roaming", "arguments": {}},
            ],
            "nl_assertions": ["Agent tells the user roaming is on"],
            "communicate_info": ["L1"],
        },
    },
    {
        "id": "t2",
        "user_scenario": {"instructions": "pay"},
        "evaluation_criteria": {"actions": [{"name": "send_payment_request", "arguments": {"bill_id": "B1"}}]},
    },
    {"id": "t-unused", "evaluation_criteria": {"actions": []}},
]
INFO = {
    "agent_info": {
        "implementation": "llm_agent",
        "llm": "gpt-4o",
        "llm_args": {"temperature": 0.0, "api_key": SECRET, "api_base": f"https://{SECRET}.example"},
    },
    "user_info": {"llm": "gpt-4o", "llm_args": {"api_key": SECRET}},
    "environment_info": {"domain_name": "telecom", "policy": "...", "tool_defs": None},
}


def results_file(tmp_path: Path, **changes: Any) -> Path:
    doc = {"timestamp": "2025-08-10", "info": INFO, "tasks": TASKS, "simulations": [SIM_A, SIM_B, SIM_C], **changes}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def good(path: Path, options: Options | None = None) -> tuple[Any, list[Trajectory]]:
    conversion = convert("tau2", path, options)
    out = []
    for _, item in conversion.records():
        assert not isinstance(item, InvalidTrajectory), str(item)
        out.append(item)
    return conversion, out


def test_one_trajectory_per_simulation_with_the_agents_calls_only(tmp_path: Path) -> None:
    conversion, (a, b, c) = good(results_file(tmp_path))
    assert [(t.case_id, t.trial, t.reward) for t in (a, b, c)] == [("t1", 0, 1.0), ("t1", 1, 0.0), ("t2", 0, None)]
    assert [x.name for x in a.calls] == ["get_customer", "get_line", "get_plan"]  # toggle_roaming is the user's
    assert [x.arguments for x in a.calls] == [{"phone": "555-0101"}, {"line_id": "L1"}, {"plan_id": "P9"}]
    assert a.calls[0].error is None and a.calls[0].observation == '{"customer_id": "C1"}'
    assert a.calls[1].error is not None and a.calls[1].error.message == "line L1 is suspended"  # error: true
    assert a.calls[2].error is not None and not a.calls[2].error.injected  # "Error: …" without the field
    assert b.calls[0].error is not None and b.calls[1].error is None  # "Error …" is one, "Errors on…" not
    assert c.calls[0].error is None
    assert a.question == "My data is slow. I am John, 555-0101." and a.answer == "Great, you are all set."
    assert (a.stopped, b.stopped, c.stopped) == (None, "step_limit", None)
    said = [(m.role, m.calls_before, m.content) for m in a.messages or []]
    assert said == [
        ("assistant", 0, "Hi! How can I help you today?"),
        ("user", 0, "My data is slow. I am John, 555-0101."),
        ("assistant", 0, "Let me look you up."),
        ("assistant", 3, "Please turn roaming on."),
        ("user", 3, "[on their own device: toggle_roaming() -> Roaming is now ON]\nDone, roaming is on."),
        ("assistant", 3, "Great, you are all set."),
    ]
    # the agent's requests only (the user's message carries usage too, it is the simulated user's)
    assert [(m.model, m.input_tokens, m.output_tokens) for m in a.model_calls or []] == [
        ("gpt-4o", 1000, 20),
        ("gpt-4o", 1000, 20),
        ("gpt-4o", 1000, 20),
        ("gpt-4o", 1200, 8),
    ]
    assert b.model_calls is None
    assert "1 tool calls are the simulated user's own" in " ".join(conversion.notes)


def test_tasks_become_cases_with_expected_calls_and_notes(tmp_path: Path) -> None:
    conversion, _ = good(results_file(tmp_path))
    cases = {c["id"]: c for c in conversion.suite["cases"]}
    assert set(cases) == {"t1", "t2"}  # a task no simulation ran is left out
    assert cases["t1"]["expected_calls"] == [{"name": "get_line", "arguments": {"line_id": "L1"}}]
    assert cases["t1"]["match"] == "subset"
    assert cases["t1"]["notes"] == [
        "the user is expected to call toggle_roaming() on their own device",
        "assertion: Agent tells the user roaming is on",
        "to communicate: L1",
        "user instructions: reason_for_call: slow data",
    ]  # what the blame reads
    assert cases["t1"]["question"] == "My data is slow. I am John, 555-0101."
    assert cases["t2"]["expected_calls"] == [{"name": "send_payment_request", "arguments": {"bill_id": "B1"}}]
    assert conversion.suite["toolset"]["label"] == "inferred from the traces"
    assert any("inferred from the traces" in n for n in conversion.notes)
    suite = parse_suite(conversion.suite)  # the notes do not stop the suite from loading
    _, trajs = good(results_file(tmp_path))
    report = score_trajectories(suite, trajs).to_json()
    by = {(c["case_id"], c["trial"]): c for c in report["cases"]}
    assert by[("t1", 0)]["passed"] and not by[("t1", 1)]["passed"]  # the reward decides, as in τ²


def test_tools_file_and_declared_tool_defs(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    schema = {"type": "object", "properties": {"line_id": {"type": "string"}}, "required": ["line_id"]}
    tools.write_text(json.dumps([{"name": "get_line", "description": "A line.", "parameters": schema}]))
    conversion, _ = good(results_file(tmp_path), Options(tools=tools))
    # t2's expected action names a tool the file lacks: added by name, so the suite holds its own reference
    tools_of = [(t["name"], t["parameters"]) for t in conversion.suite["toolset"]["tools"]]
    assert tools_of == [("get_line", schema), ("send_payment_request", {"type": "object"})]
    assert not any("inferred from the traces" in n for n in conversion.notes)
    assert (
        "1 tools the tasks' actions name are not among the tool schemas: added by name, any arguments validate "
        "(send_payment_request)" in conversion.notes
    )
    declared = {
        **INFO,
        "environment_info": {
            "domain_name": "telecom",
            "tool_defs": {"get_line": {"description": "A line.", "parameters": schema}},
        },
    }
    conversion, _ = good(results_file(tmp_path, info=declared))
    assert [t["name"] for t in conversion.suite["toolset"]["tools"]] == ["get_line", "send_payment_request"]
    assert "info.environment_info.tool_defs" in conversion.notes[0]


def test_no_key_of_info_is_stored_echoed_or_exported(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = runner.invoke(cli, ["convert", "--from", "tau2", str(results_file(tmp_path)), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 trajectories, 6 calls" in r.output
    written = (out / "suite.yaml").read_text() + (out / "trajectories.jsonl").read_text()
    assert SECRET not in written + r.output and "api_key" not in written and "llm_args" not in written


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([{"task_id": 1, "trial": 0, "reward": 1, "traj": []}], "expected a τ²-bench results file"),
        ({"info": INFO, "tasks": TASKS}, "no 'simulations' list"),
        (
            {"info": INFO, "tasks": TASKS, "simulations": [{**SIM_A, "messages": [], "ticks": [{"tick_id": 0}]}]},
            "voice-mode",
        ),
    ],
)
def test_other_files_are_refused_saying_what_was_expected(doc: Any, says: str, tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SuiteError, match=says):
        convert("tau2", path)
    r = runner.invoke(cli, ["convert", "--from", "tau2", str(path), "--out", str(tmp_path / "out")])
    assert r.exit_code != 0 and "expected a τ²-bench results file" in r.output


def test_a_run_folder_reads_its_results_json(tmp_path: Path) -> None:
    results_file(tmp_path)
    _, trajs = good(tmp_path)
    assert len(trajs) == 3


def test_a_broken_simulation_is_named(tmp_path: Path) -> None:
    path = results_file(tmp_path, simulations=[SIM_A, {"task_id": "t9"}])
    items = [item for _, item in convert("tau2", path).records()]
    assert isinstance(items[1], InvalidTrajectory) and "simulations[1].messages" in str(items[1])


def test_import_stores_the_simulations(db_url: str, tmp_path: Path) -> None:
    r = runner.invoke(cli, ["import", str(results_file(tmp_path)), "--format", "tau2", "--run", "t2", "--db", db_url])
    assert r.exit_code == 0, r.output
    assert "stored 3 trajectories, 6 calls" in r.stderr and SECRET not in r.output
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run = client.get("/api/runs").json()["data"][0]
        f = client.get(f"/api/runs/{run['id']}/figures").json()
    # t1: 1 reward of 2; t2 has no reward and made its expected call
    assert f["trajectories"] == 3 and f["pass_hat_k"]["1"] == 0.75
    assert f["usage"]["input_tokens"] == 4200 and f["usage"]["model_calls"] == 4


def test_the_trajectory_page_shows_the_case_notes_escaped(db_url: str, tmp_path: Path) -> None:
    """What τ²-bench checks and ToolLens does not score (the user's own actions, the assertions,
    what must be said) is on each trajectory's page, as text."""
    tasks = json.loads(json.dumps(TASKS))
    tasks[0]["evaluation_criteria"]["nl_assertions"].append("<script>alert(1)</script> says <b>done</b>")
    r = runner.invoke(
        cli, ["import", str(results_file(tmp_path, tasks=tasks)), "--format", "tau2", "--run", "t2", "--db", db_url]
    )
    assert r.exit_code == 0, r.output
    with TestClient(
        create_app(Settings(database_url=db_url, auto_migrate=False)), base_url="http://127.0.0.1"
    ) as client:
        run = client.get("/api/runs").json()["data"][0]
        rows = client.get(f"/api/runs/{run['id']}/trajectories").json()["data"]
        pages = {t["case_id"]: client.get(f"/trajectories/{t['id']}").text for t in rows}
    t1, t2 = pages["t1"], pages["t2"]
    assert 'id="case-notes"' in t1
    assert "<li>user instructions: pay</li>" in t2  # t2's task has only the user's instructions to note
    for note in (
        "the user is expected to call toggle_roaming() on their own device",
        "assertion: Agent tells the user roaming is on",
        "to communicate: L1",
    ):
        assert f"<li>{note}</li>" in t1
    assert "<script>alert(1)" not in t1 and "&lt;script&gt;alert(1)&lt;/script&gt; says &lt;b&gt;done&lt;/b&gt;" in t1


@shared_data(TELECOM)
def test_the_real_telecom_run() -> None:
    raw = json.loads(TELECOM.read_text())
    conversion, trajs = good(TELECOM)
    assert len(trajs) == 20 and [t.trial for t in trajs] == [s["trial"] for s in raw["simulations"]]
    assert sum(len(t.calls) for t in trajs) == 90  # 215 calls in the file, 125 of them the user's
    assert "125 tool calls are the simulated user's own" in " ".join(conversion.notes)
    assert [t.reward for t in trajs] == [s["reward_info"]["reward"] for s in raw["simulations"]]
    errors = [c.observation for t in trajs for c in t.calls if c.error is not None]
    assert errors == ["Error: Line must be suspended to resume"]
    prompt = sum(
        m["usage"]["prompt_tokens"]
        for s in raw["simulations"]
        for m in s["messages"]
        if m["role"] == "assistant" and m.get("usage")
    )
    assert sum(m.input_tokens or 0 for t in trajs for m in t.model_calls or []) == prompt
    assert {m.model for t in trajs for m in t.model_calls or []} == {"gpt-4o"}
    report = score_trajectories(parse_suite(conversion.suite), trajs).to_json()
    assert sum(1 for c in report["cases"] if c["passed"]) == 14  # the file's rewards: 14 of 20 are 1.0
    cases = {c["id"]: c for c in conversion.suite["cases"]}
    assert cases["[service_issue]overdue_bill_suspension[PERSONA:Easy]"]["expected_calls"] == [
        {"name": "send_payment_request", "arguments": {"customer_id": "C1001", "bill_id": "B1234321"}},
        {"name": "resume_line", "arguments": {"customer_id": "C1001", "line_id": "L1002"}},
    ]


def test_the_convert_help_names_every_format() -> None:
    from app.commands.convert import FORMAT_HELP
    from app.importers import FORMATS

    assert all(f" {name}," in FORMAT_HELP or f" {name}." in FORMAT_HELP for name in FORMATS)


def test_import_reads_a_run_folder(tmp_path: Path) -> None:
    results_file(tmp_path)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    r = runner.invoke(cli, ["import", str(tmp_path), "--format", "tau2", "--run", "folder", "--db", db])
    assert r.exit_code == 0, r.output
    assert "stored 3 trajectories, 6 calls" in r.stderr


def test_a_simulation_is_scored_against_the_task_it_was_graded_on(tmp_path: Path) -> None:
    # s3 says task t2, but τ² graded it on t1's actions; s2 on actions no task has
    t1_actions = TASKS[0]["evaluation_criteria"]["actions"]
    sim_c = {**SIM_C, "reward_info": {"reward": 0.0, "action_checks": [{"action": a} for a in t1_actions]}}
    sim_b = {
        **SIM_B,
        "reward_info": {
            "reward": 0.0,
            "action_checks": [
                {"action": {"action_id": "z", "requestor": "assistant", "name": "calculate", "arguments": {"e": "2+2"}}}
            ],
        },
    }
    conversion, (a, b, c) = good(results_file(tmp_path, simulations=[SIM_A, sim_b, sim_c]))
    # s3 carried trial 0, which s1 holds in t1: it takes the next free trial there
    assert [(t.case_id, t.trial) for t in (a, b, c)] == [("t1", 0), ("t1:graded-1", 1), ("t1", 1)]
    cases = {x["id"]: x for x in conversion.suite["cases"]}
    assert set(cases) == {"t1", "t1:graded-1"}  # t2 was run by no simulation, as graded
    assert cases["t1:graded-1"]["expected_calls"] == [{"name": "calculate", "arguments": {"e": "2+2"}}]
    assert cases["t1"]["notes"][0] == (
        "τ²-bench graded 1 simulation(s) whose task_id names another task on this "
        "task's actions (reward_info.action_checks): s3 (task_id t2, trial 1 "
        "here); they are "
        "scored here"
    )
    assert (
        "2 of 2 simulations were graded (reward_info.action_checks) on actions that differ from the task of "
        "the same id in `tasks`" in " ".join(conversion.notes)
    )
    # the toolset holds every tool an expected call names, called or not
    assert "calculate" in {t["name"] for t in conversion.suite["toolset"]["tools"]}


RETAIL = DATA / "tau2" / "toolorchestra_retail_gpt-4.1-mini.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"


@shared_data(RETAIL, SCHEMAS)
def test_the_real_retail_run_joined_by_what_was_graded(tmp_path: Path) -> None:
    raw = json.loads(RETAIL.read_text())
    conversion, trajs = good(RETAIL)
    assert len(trajs) == 114
    # simulations[0] says task 0; its action checks are task 89's (action_id 89_0) and so is its conversation
    assert raw["simulations"][0]["task_id"] == "0" and trajs[0].case_id == "89"
    assert raw["simulations"][0]["reward_info"]["action_checks"][0]["action"]["action_id"] == "89_0"
    assert "111 of 112 simulations were graded" in " ".join(conversion.notes)
    assert "calculate" in {t["name"] for t in conversion.suite["toolset"]["tools"]}
    out = tmp_path / "out"
    r = runner.invoke(cli, ["convert", "--from", "tau2", str(RETAIL), "--tools", str(SCHEMAS), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "111 of 112 simulations were graded" in r.stderr
    assert runner.invoke(cli, ["lint", str(out / "suite.yaml")]).exit_code in (0, 1)  # findings, no mistake
    r = runner.invoke(cli, ["score", str(out / "suite.yaml"), str(out / "trajectories.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    # with the real schemas every call validates; the rewards decide which pass (τ²'s own)
    assert data["schema_validity"] == {"num": 873, "den": 873} and data["hallucinated_tools"]["num"] == 0
    rewarded = sum(1 for s in raw["simulations"] if s["reward_info"]["reward"] == 1.0)
    assert sum(1 for c in data["cases"] if c["passed"]) == rewarded == 96
