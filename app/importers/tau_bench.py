"""``tau-bench``: tau-bench's historical trajectories (a JSON array, or JSON
Lines, of ``{task_id, trial, reward, info: {task: {instruction, actions}},
traj}``).

Each task becomes a case whose expected calls are the task's actions as a
``subset`` reference (they list only the state-changing calls), its
instruction kept as a ``user instructions: …`` note and the system prompt's
current time as ``policy time: …`` (both read by the blame); each run
keeps its reward, so a trajectory passes when the reward is 1 and pass^k is
tau-bench's own; a run cut at tau-bench's step limit (``info.reward_info``
null: the judge never scored it) says ``"stopped": "step_limit"``. The
policy's free checked bags are kept as a ``policy bags: …`` note (the blame's
airline rule). ``--tools`` gives the toolset (a schema file with several
domains picks the one the runs call, or ``--domain``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory
from app.core.records import parse_record
from app.core.score.blame import BAGS_NOTE, INSTRUCTIONS_NOTE, POLICY_TIME_NOTE, bag_allowance_note
from app.importers.base import Conversion, Converted, Options
from app.importers.jsonstream import iter_json_values
from app.importers.openai_messages import messages_to_record
from app.importers.tau2 import _note, policy_time
from app.importers.toolsets import add_expected_tools, resolve_toolset

NAME = "tau-bench"


def case_id(task_id: Any) -> str:
    return f"task-{task_id}"


def _task(value: Mapping[str, Any]) -> Mapping[str, Any]:
    info = value.get("info")
    task = info.get("task") if isinstance(info, Mapping) else None
    return task if isinstance(task, Mapping) else {}


def _record(value: Any, line: int, source: str) -> dict[str, Any]:
    def bad(message: str, where: str) -> InvalidTrajectory:
        return InvalidTrajectory(message, index=line, field=where, source=source)

    if not isinstance(value, Mapping):
        raise bad(f"a tau-bench run is an object, got {type(value).__name__}", "")
    task_id = value.get("task_id")
    if not isinstance(task_id, (int, str)) or isinstance(task_id, bool):
        raise bad("required, an integer or a string", "task_id")
    traj = value.get("traj")
    if not isinstance(traj, list):
        raise bad("required, a list of chat messages", "traj")
    if "reward" not in value:
        raise bad("required, a number (tau-bench's 0/1 outcome)", "reward")
    data = messages_to_record(traj)
    data.update(case_id=case_id(task_id), trial=value.get("trial", 0), reward=value.get("reward"))
    info = value.get("info")
    # tau-bench writes the judge's ``reward_info`` when the episode ends (the user's stop, a transfer); a run
    # cut at its step limit (30 by default) keeps it null: its reward 0 is the cut, no verdict of the judge
    if isinstance(info, Mapping) and "reward_info" in info and info["reward_info"] is None:
        data["stopped"] = "step_limit"
    return data


def _case(
    task_id: Any, task: Mapping[str, Any], question: str, when: str | None = None, bags: str | None = None
) -> dict[str, Any]:
    actions = task.get("actions")
    # no ``actions`` (a record without its task): no reference known, not a reference that expects no call
    expected = (
        [
            {"name": a["name"], "arguments": dict(a["kwargs"]) if isinstance(a.get("kwargs"), Mapping) else {}}
            for a in actions
            if isinstance(a, Mapping) and isinstance(a.get("name"), str)
        ]
        if isinstance(actions, list)
        else None
    )
    instruction = task.get("instruction")
    text = instruction if isinstance(instruction, str) and instruction.strip() else question
    case: dict[str, Any] = {
        "id": case_id(task_id),
        "question": text or f"tau-bench task {task_id}",
        "expected_calls": expected,
        "match": "subset",
        "tags": ["tau-bench"],
    }
    notes = []
    if isinstance(instruction, str) and instruction.strip():
        notes.append(_note(INSTRUCTIONS_NOTE + " ".join(instruction.split())))
    if when:
        notes.append(POLICY_TIME_NOTE + when)
    if bags:
        notes.append(_note(BAGS_NOTE + bags))
    if notes:
        case["notes"] = notes
    return case


def _system(traj: Any) -> Any:
    """The system message's text (the policy), or None."""
    first = traj[0] if isinstance(traj, list) and traj else None
    return first.get("content") if isinstance(first, Mapping) and first.get("role") == "system" else None


def convert(path: Path, options: Options) -> Conversion:
    source = str(path)

    def records() -> Iterator[Converted]:
        for line, value in iter_json_values(path):
            if isinstance(value, InvalidTrajectory):
                yield line, value
                continue
            try:
                yield line, parse_record(_record(value, line, source), index=line, source=source)
            except InvalidTrajectory as exc:
                yield line, exc

    cases: dict[str, dict[str, Any]] = {}
    called: set[str] = set()
    for line, value in iter_json_values(path):
        if isinstance(value, InvalidTrajectory):
            continue
        try:
            traj = parse_record(_record(value, line, source), index=line, source=source)
        except InvalidTrajectory:
            continue
        called.update(c.name for c in traj.calls)
        if traj.case_id not in cases:
            policy = _system(value["traj"])
            cases[traj.case_id] = _case(
                value["task_id"], _task(value), traj.question, policy_time(policy), bag_allowance_note(policy)
            )
    expected = {e["name"] for c in cases.values() for e in c["expected_calls"] or ()}
    toolset, notes = resolve_toolset(options.tools, options.domain, lambda: called | expected, name=path.stem)
    notes.extend(add_expected_tools(toolset, expected))
    suite = {"name": f"tau-bench {toolset['name']}", "toolset": toolset, "cases": list(cases.values())}
    return Conversion(suite=suite, records=records, notes=notes)
