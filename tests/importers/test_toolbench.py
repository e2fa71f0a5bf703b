"""``--from toolbench`` on ToolBench's real answer files, checked against our
hand-written labels (tests/gold/toolbench.yaml), and on small hand-written
runs for what the samples do not show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import Trajectory
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import parse_suite
from app.importers import convert
from tests.resources import DATA, require_data

TOOLBENCH = DATA / "toolbench"
GOLD = yaml.safe_load((Path(__file__).parents[1] / "gold" / "toolbench.yaml").read_text())["runs"]
runner = CliRunner()


need = require_data  # the shared sample files (tests/resources.py says how to get them)


def records(path: Path) -> list[Trajectory]:
    out = []
    for _, item in convert("toolbench", path).records():
        assert not isinstance(item, InvalidTrajectory), str(item)
        out.append(item)
    return out


@pytest.mark.parametrize("name", sorted(GOLD))
def test_each_run_matches_its_labels(name: str) -> None:
    need(TOOLBENCH / name)
    label = GOLD[name]
    (traj,) = records(TOOLBENCH / name)
    assert traj.case_id == label["case_id"]
    assert traj.reward == label["reward"]
    assert traj.stopped == label["stopped"]
    assert [c.name for c in traj.calls] == label["calls"]
    assert "Finish" not in [c.name for c in traj.calls]
    assert traj.answer.startswith(label["answer_starts"])
    errored = {i: c.error.message for i, c in enumerate(traj.calls) if c.error is not None}
    assert errored == {e["call"]: e["error"] for e in label["errors"]}
    assert all(not traj.calls[e["call"]].error.injected for e in label["errors"])  # type: ignore[union-attr]
    for ok in label.get("not_errors", []):
        assert traj.calls[ok["call"]].error is None
    assert traj.question == json.loads((TOOLBENCH / name).read_text())["answer_generation"]["query"]


def test_the_folder_is_one_suite_and_its_runs() -> None:
    need(TOOLBENCH)
    conversion = convert("toolbench", TOOLBENCH)
    trajs = records(TOOLBENCH)
    assert sorted(t.case_id for t in trajs) == sorted(label["case_id"] for label in GOLD.values())
    assert conversion.notes == [
        "1 files hold no ToolBench answer and were passed over: instruction_G1_query.json",
        "2 called tool names are not among the tools offered (they count as hallucinated tools): "
        "authenticate_currents_news, authenticate_for_currents_news",
    ]
    tools = [t["name"] for t in conversion.suite["toolset"]["tools"]]
    assert len(tools) == 14 and "Finish" not in tools  # 2 + 10 + 2 offered, Finish left out
    suite = parse_suite(conversion.suite)
    assert suite.case("query-57").question.startswith("I'm interested in learning more")  # type: ignore[union-attr]
    report = score_trajectories(suite, trajs).to_json()
    assert report["hallucinated_tools"] == {"num": 3, "den": 16}  # the three invented names of run 69
    assert [c["passed"] for c in sorted(report["cases"], key=lambda c: c["case_id"])] == [
        True,
        True,
        True,
        True,
        False,
    ]  # win is the reward: 69 lost


def test_json_lines_of_runs_read_the_same(tmp_path: Path) -> None:
    need(TOOLBENCH)
    names = sorted(GOLD)
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps(json.loads((TOOLBENCH / n).read_text())) + "\n" for n in names))
    trajs = records(src)
    assert [t.case_id for t in trajs] == [f"answers:line-{i}" for i in range(1, 6)]
    assert [[c.name for c in t.calls] for t in trajs] == [GOLD[n]["calls"] for n in names]


def run(messages: list[Any], *, win: bool = False) -> dict[str, Any]:
    finish = {"name": "Finish", "description": "end", "parameters": {"type": "object", "properties": {}}}
    tool = {
        "name": "lookup",
        "description": "Look up.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string", "example_value": "x"}},
            "required": ["q"],
            "optional": [],
        },
    }
    return {
        "win": win,
        "answer_generation": {
            "query": "Find x",
            "function": [tool, finish],
            "final_answer": "",
            "train_messages": [messages[:2], messages],
        },
    }


def test_give_up_truncated_observation_and_question(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "You are AutoGPT"},
        {"role": "user", "content": "Find x"},
        {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"q": "x"}'}},
        {"role": "function", "name": "lookup", "content": '{"error": "Timeout error...", "response": "{\'a: [1, 2...'},
        {
            "role": "assistant",
            "content": "The service times out; I cannot find x.",
            "function_call": {"name": "Finish", "arguments": '{"return_type": "give_up_and_restart"}'},
        },
    ]
    src = tmp_path / "7_ChatGPT_DFS.json"
    src.write_text(json.dumps(run(messages), indent=2))
    (traj,) = records(src)
    assert traj.case_id == "query-7" and traj.reward == 0.0
    assert traj.stopped == "gave_up"
    assert traj.answer == "The service times out; I cannot find x."
    (call,) = traj.calls
    assert call.arguments == {"q": "x"} and call.error is not None and call.error.message == "Timeout error..."


def test_not_an_answer_file_is_refused(tmp_path: Path) -> None:
    need(TOOLBENCH)
    with pytest.raises(SuiteError, match="no ToolBench answer found"):
        convert("toolbench", TOOLBENCH / "instruction_G1_query.json")


@pytest.mark.parametrize("fmt", ["openai-messages", "anthropic-messages", "tau-bench", "toollens"])
def test_other_formats_say_the_file_is_one_pretty_printed_object(fmt: str, tmp_path: Path) -> None:
    src = tmp_path / "run.json"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": []}, indent=2))
    r = runner.invoke(cli, ["convert", "--from", fmt, str(src), "--out", str(tmp_path / "out")])
    assert r.exit_code != 0
    assert "the file is one pretty-printed JSON object" in r.output
    assert "call no tool" not in r.output


def test_cli_convert_from_toolbench(tmp_path: Path) -> None:
    need(TOOLBENCH)
    r = runner.invoke(cli, ["convert", "--from", "toolbench", str(TOOLBENCH), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "5 cases" in r.output and "5 trajectories, 16 calls" in r.output
    lines = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [line.get("stopped") for line in lines] == [None, None, None, None, "step_limit"]
