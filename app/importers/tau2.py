"""``tau2``: τ²-bench results files (``{info, tasks, simulations: [{task_id,
trial, messages, reward_info, termination_reason, …}]}``, as ``tau2 run``
writes them).

One trajectory per simulation, its ``trial`` kept and its reward
``reward_info.reward``. The agent's calls are the assistant messages'
``tool_calls`` (several per message, with or without text), matched to
``role: tool`` results by ``id``; a result with ``error: true``, or whose
content starts with the word ``Error``, is a tool error. In telecom the simulated
user calls tools on their own phone (``requestor: "user"``): those calls are
never the agent's; each is kept, with its result, in the user's message of
that turn, so the timeline shows what the user did and saw. Tokens come from
the agent's messages' ``usage``, the model from ``info.agent_info.llm``.

Each task is a case: its expected actions requested by the assistant are
the expected calls (a ``subset`` reference, as tau-bench's); the actions
the user is expected to take, the ``nl_assertions`` and the
``communicate_info`` are kept as the case's ``notes``, with the user's
instructions (``user instructions: …``) and the policy's current time
(``policy time: …``), which the blame reads (docs/blame.md). A simulation's case is
the task it was *graded* on (``reward_info.action_checks``; ``Grading``), and
the toolset holds every tool an expected action names. Nothing else of
``info`` is read: its ``llm_args`` may hold an API key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import MAX_NAME
from app.core.score.blame import BAGS_NOTE, INSTRUCTIONS_NOTE, POLICY_TIME_NOTE, bag_allowance_note
from app.core.usage import MAX_TOKENS
from app.importers.base import Conversion, Converted, Options, call_error, content_text, mark_batch, record_or_reason
from app.importers.jsonstream import read_document
from app.importers.toolsets import add_expected_tools, check_tools, resolve_toolset, toolset_document

NAME = "tau2"
_ERROR = re.compile(r"\s*Error(?![A-Za-z])")  # "Error: …", "Error - …"; not "Errors on this line: none"
_POLICY_TIME = re.compile(r"[Tt]he current time is \d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?: [A-Z]{2,4})?")
RESULTS = "results.json"  # the file in a run's folder (current τ²-bench); older ones write NAME.json
MAX_SIMULATIONS = 100_000
MAX_NOTE = 2_000
EXPECTED = (
    "expected a τ²-bench results file: a JSON object with 'simulations' (a list of {task_id, trial, "
    "messages, reward_info}) as `tau2 run` writes it"
)
STOPPED = {
    "max_steps": "step_limit",
    "too_many_errors": "error_limit",
    "agent_error": "agent_error",
    "user_error": "user_error",
}


def _results_file(path: Path) -> Path:
    return path / RESULTS if path.is_dir() else path


def read_results(path: Path) -> Mapping[str, Any]:
    """The results document, refused with what was expected when it is not one."""
    file = _results_file(path)
    doc = read_document(file, hint="τ²-bench results files are read whole")
    source = str(file)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("simulations"), list):
        extra = ""
        if isinstance(doc, Mapping) and (file.parent / "simulations").is_dir():
            extra = " (this run keeps one file per simulation: `tau2 convert-results RUN --to json` joins them)"
        raise SuiteError(f"no 'simulations' list: {EXPECTED}{extra}", path=source)
    sims = doc["simulations"]
    if len(sims) > MAX_SIMULATIONS:
        raise SuiteError(f"more than {MAX_SIMULATIONS} simulations", path=source)
    if any(isinstance(s, Mapping) and s.get("ticks") for s in sims):
        raise SuiteError(
            "a voice-mode (full-duplex) results file: its simulations are audio ticks, not "
            f"messages; only text-mode runs are read ({EXPECTED})",
            path=source,
        )
    return doc


def _text(value: Any) -> str:
    return content_text(value) if value is not None else ""


def _info(doc: Mapping[str, Any], *keys: str) -> Any:
    """A named field of ``info`` (only those the importer uses are ever read)."""
    at: Any = doc.get("info")
    for key in keys:
        at = at.get(key) if isinstance(at, Mapping) else None
    return at


def agent_model(doc: Mapping[str, Any]) -> str | None:
    llm = _info(doc, "agent_info", "llm")
    return llm[:256] if isinstance(llm, str) and llm else None


def _call_text(tc: Mapping[str, Any]) -> str:
    name = tc.get("name") if isinstance(tc.get("name"), str) else "?"
    args = tc.get("arguments")
    return f"{name}({_json(args) if isinstance(args, Mapping) and args else ''})"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _tokens(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_TOKENS else None


def simulation_to_record(sim: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """The record fields of one simulation (raises InvalidTrajectory-free
    shapes only: ``parse_record`` checks the result)."""
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    users_calls: dict[str, str] = {}  # the user's own calls waiting for their result: id -> "name(args)"
    said: list[dict[str, Any]] = []
    pending: list[str] = []  # what the user said and did since the agent last spoke
    question = ""
    answer = ""
    model_calls: list[dict[str, Any]] = []

    def user_turn() -> None:
        if pending:
            said.append({"role": "user", "content": "\n".join(pending), "calls_before": len(calls)})
            pending.clear()

    messages = sim.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        tool_calls = [tc for tc in m.get("tool_calls") or () if isinstance(tc, Mapping)]
        if role == "assistant":
            user_turn()
            usage = m.get("usage")
            if isinstance(usage, Mapping):
                entry = {
                    "model": model,
                    "input_tokens": _tokens(usage.get("prompt_tokens")),
                    "output_tokens": _tokens(usage.get("completion_tokens")),
                }
                model_calls.append({k: v for k, v in entry.items() if v is not None})
            text = _text(m.get("content"))
            if text.strip():
                answer = text
                said.append({"role": "assistant", "content": text, "calls_before": len(calls)})
            start = len(calls)
            for tc in tool_calls:
                name = tc.get("name")
                call = {
                    "name": name if isinstance(name, str) else "",
                    "arguments": tc.get("arguments"),
                    "observation": None,
                    "error": None,
                }
                calls.append(call)
                if isinstance(tc.get("id"), str):
                    by_id[tc["id"]] = call
            mark_batch(calls, start)
        elif role == "user":
            text = _text(m.get("content"))
            if text.strip():
                question = question or text
                pending.append(text)
            for tc in tool_calls:
                users_calls[str(tc.get("id"))] = _call_text(tc)
        elif role == "tool":
            ref = m.get("id")
            content = _text(m.get("content"))
            if m.get("requestor") == "user" or (isinstance(ref, str) and ref in users_calls):
                what = users_calls.pop(str(ref), "a tool")
                pending.append(f"[on their own device: {what} -> {content}]")
                continue
            found = by_id.pop(ref, None) if isinstance(ref, str) else None
            if found is None:  # no id: the earliest call without a result
                found = next((c for c in calls if c["observation"] is None and c["error"] is None), None)
            if found is not None:
                found["observation"] = content
                if m.get("error") is True or _ERROR.match(content):
                    found["error"] = call_error(content)
    user_turn()
    data: dict[str, Any] = {"question": question, "calls": calls, "answer": answer, "messages": said}
    if model_calls:
        data["model_calls"] = model_calls
    reward_info = sim.get("reward_info")
    reward = reward_info.get("reward") if isinstance(reward_info, Mapping) else None
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        data["reward"] = reward
    stopped = STOPPED.get(str(sim.get("termination_reason")))
    if stopped is not None:
        data["stopped"] = stopped
    return data


def case_id(task_id: Any) -> str:
    return str(task_id)[:MAX_NAME]


def _record(sim: Any, i: int, model: str | None, source: str, grading: Grading | None = None) -> dict[str, Any]:
    where = f"simulations[{i}]"
    if not isinstance(sim, Mapping):
        raise InvalidTrajectory(
            f"a simulation is an object, got {type(sim).__name__}", index=i + 1, field=where, source=source
        )
    task_id = sim.get("task_id")
    if not isinstance(task_id, (int, str)) or isinstance(task_id, bool) or not str(task_id):
        raise InvalidTrajectory(
            "required, a string or an integer", index=i + 1, field=f"{where}.task_id", source=source
        )
    if not isinstance(sim.get("messages"), list):
        raise InvalidTrajectory("required, a list of messages", index=i + 1, field=f"{where}.messages", source=source)
    data = simulation_to_record(sim, model)
    trial = sim.get("trial", 0)
    graded = grading.case_of(i) if grading is not None else None
    renumbered = grading.trial_of(i) if grading is not None else None
    data.update(
        case_id=graded or case_id(task_id),
        trial=renumbered if renumbered is not None else trial if trial is not None else 0,
    )
    return data


def _note(text: str) -> str:
    return text if len(text) <= MAX_NOTE else text[:MAX_NOTE] + "…"


def task_case(task: Mapping[str, Any], question: str) -> dict[str, Any]:
    """A τ² task as a case: the assistant's expected actions as a subset
    reference; the user's, the assertions and what must be said as notes."""
    cid = case_id(task["id"])
    criteria = task.get("evaluation_criteria")
    criteria = criteria if isinstance(criteria, Mapping) else {}
    expected: list[dict[str, Any]] | None = [] if isinstance(criteria.get("actions"), list) else None
    notes: list[str] = []
    for action in criteria.get("actions") or ():
        if not isinstance(action, Mapping) or not isinstance(action.get("name"), str):
            continue
        args = action.get("arguments")
        args = dict(args) if isinstance(args, Mapping) else {}
        if action.get("requestor", "assistant") == "user":
            notes.append(_note(f"the user is expected to call {_call_text(action)} on their own device"))
            continue
        compare = action.get("compare_args")
        if isinstance(compare, list):
            args = {k: v for k, v in args.items() if k in compare}
        assert expected is not None
        expected.append({"name": action["name"], "arguments": args})
    for key, label in (("nl_assertions", "assertion"), ("communicate_info", "to communicate")):
        for item in criteria.get(key) or ():
            notes.append(_note(f"{label}: {item if isinstance(item, str) else _json(item)}"))
    instructions = user_instructions(task)
    if instructions:
        notes.append(_note(INSTRUCTIONS_NOTE + instructions))
    case: dict[str, Any] = {
        "id": cid,
        "question": question or _scenario(task) or f"τ²-bench task {cid}",
        "match": "subset",
        "tags": ["tau2"],
    }
    if expected is not None:
        case["expected_calls"] = expected
    if notes:
        case["notes"] = notes
    return case


def user_instructions(task: Mapping[str, Any]) -> str:
    """The simulated user's instructions as one text (what app/core/score/blame.py reads):
    ``known_info``, ``unknown_info``, ``reason_for_call`` and ``task_instructions``."""
    scenario = task.get("user_scenario")
    instructions = scenario.get("instructions") if isinstance(scenario, Mapping) else None
    if isinstance(instructions, str):
        return instructions
    if not isinstance(instructions, Mapping):
        return ""
    parts = []
    for key in ("known_info", "unknown_info", "reason_for_call", "task_instructions"):
        value = instructions.get(key)
        if isinstance(value, str) and value.strip(" .\n"):
            parts.append(f"{key}: {' '.join(value.split())}")
    return " | ".join(parts)


def policy_time(text: Any) -> str | None:
    """The policy's own "current time" sentence, when it states one."""
    m = _POLICY_TIME.search(text[:20_000]) if isinstance(text, str) else None
    return m.group(0) if m else None


def _scenario(task: Mapping[str, Any]) -> str:
    scenario = task.get("user_scenario")
    instructions = scenario.get("instructions") if isinstance(scenario, Mapping) else None
    if isinstance(instructions, Mapping):
        instructions = instructions.get("reason_for_call")
    return instructions if isinstance(instructions, str) else ""


def _tool_defs(defs: Any) -> list[Any]:
    """The declared tools: a list, or a mapping of names to schemas."""
    if isinstance(defs, list):
        return defs
    if isinstance(defs, Mapping):
        return [
            {**v, "name": k} if isinstance(v, Mapping) and "name" not in v and "function" not in v else v
            for k, v in defs.items()
        ]
    return []


def _records(doc: Mapping[str, Any], source: str, grading: Grading | None = None) -> Iterator[Converted]:
    model = agent_model(doc)
    grading = grading or Grading(doc)
    for i, sim in enumerate(doc["simulations"]):
        yield record_or_reason(
            i + 1,
            partial(_record, sim, i, model, source, grading),
            source=source,
            what="simulation",
            field=f"simulations[{i}]",
        )


def _action_key(actions: Any) -> str:
    """A list of actions as what decides a grade: each one's requestor, name and arguments, in order."""
    out = []
    for a in actions if isinstance(actions, list) else ():
        if isinstance(a, Mapping):
            out.append([a.get("requestor", "assistant"), a.get("name"), a.get("arguments")])
    return json.dumps(out, sort_keys=True, ensure_ascii=False, default=str)


class Grading:
    """Which task each simulation was *graded* on. τ² grades a simulation on the actions in its
    ``reward_info.action_checks``; in some real files they are another task's than the one its
    ``task_id`` names (and the conversation is that other task's). A simulation's case is the
    task whose actions it was graded on; one graded on actions no task has gets a case of its own."""

    def __init__(self, doc: Mapping[str, Any]):
        tasks = [
            t
            for t in doc.get("tasks") or ()
            if isinstance(t, Mapping) and isinstance(t.get("id"), (str, int)) and not isinstance(t["id"], bool)
        ]
        by_key: dict[str, list[str]] = {}
        for t in tasks:
            criteria = t.get("evaluation_criteria")
            actions = criteria.get("actions") if isinstance(criteria, Mapping) else None
            if isinstance(actions, list):
                by_key.setdefault(_action_key(actions), []).append(case_id(t["id"]))
        own_keys = {
            case_id(t["id"]): _action_key((t.get("evaluation_criteria") or {}).get("actions"))
            for t in tasks
            if isinstance(t.get("evaluation_criteria") or {}, Mapping)
        }
        self.cases: dict[int, str] = {}  # simulation index -> the case it was graded on, where it is not its own
        self.moved: dict[str, list[tuple[str, str, int]]] = {}  # graded case -> [(simulation id, task_id, index)]
        self.unmatched: dict[str, list[Any]] = {}  # a case of its own -> the graded actions
        self.checked = 0  # simulations with action checks
        for i, sim in enumerate(doc.get("simulations") or ()):
            info = sim.get("reward_info") if isinstance(sim, Mapping) else None
            checks = info.get("action_checks") if isinstance(info, Mapping) else None
            task_id = sim.get("task_id") if isinstance(sim, Mapping) else None
            if not isinstance(checks, list) or not isinstance(task_id, (str, int)) or isinstance(task_id, bool):
                continue
            self.checked += 1
            graded = [c.get("action") for c in checks if isinstance(c, Mapping)]
            key = _action_key(graded)
            own = case_id(task_id)
            if own_keys.get(own) == key:
                continue
            if own not in own_keys and key not in by_key:  # a task the file does not hold: graded on these
                self.unmatched.setdefault(own, graded)
                continue
            found = by_key.get(key, [])
            named = {str(a.get("action_id", "")).rpartition("_")[0] for a in graded if isinstance(a, Mapping)}
            target = next((c for c in found if c in named), found[0] if found else None)
            if target is None:
                target = case_id(f"{own}:graded-{len(self.unmatched) + 1}")
                self.unmatched[target] = graded
            self.cases[i] = target
            sim_id = sim.get("id")
            self.moved.setdefault(target, []).append((str(sim_id)[:64] if sim_id is not None else f"#{i}", own, i))

        self.trials: dict[int, int] = {}  # simulation index -> its trial, where joining took the one it carried
        self._renumber(doc)

    def _renumber(self, doc: Mapping[str, Any]) -> None:
        """A simulation joined to a case keeps its trial unless another simulation of that case has
        it (a run holds one trajectory per case and trial): then the next free one."""
        taken: set[tuple[str, Any]] = set()
        sims = [s if isinstance(s, Mapping) else {} for s in doc.get("simulations") or ()]
        for i, sim in enumerate(sims):
            if i not in self.cases:
                taken.add((case_id(sim.get("task_id")), sim.get("trial", 0) or 0))
        for i, target in self.cases.items():
            trial = sims[i].get("trial", 0) or 0
            if (target, trial) in taken and isinstance(trial, int):
                trial = next(t for t in range(len(sims) + 1) if (target, t) not in taken)
                self.trials[i] = trial
            taken.add((target, trial))

    def case_of(self, index: int) -> str | None:
        return self.cases.get(index)

    def trial_of(self, index: int) -> int | None:
        return self.trials.get(index)

    def case_notes(self, cid: str) -> list[str]:
        moved = self.moved.get(cid)
        if not moved:
            return []
        shown = ", ".join(
            f"{sim} (task_id {own}" + (f", trial {self.trials[i]} here" if i in self.trials else "") + ")"
            for sim, own, i in moved[:10]
        )
        more = f" and {len(moved) - 10} more" if len(moved) > 10 else ""
        whose = "actions no task of the file has" if cid in self.unmatched else "this task's actions"
        return [
            _note(
                f"τ²-bench graded {len(moved)} simulation(s) whose task_id names another task on {whose} "
                f"(reward_info.action_checks): {shown}{more}; they are scored here"
            )
        ]

    def note(self) -> str | None:
        moved = sum(len(v) for v in self.moved.values())
        if not moved:
            return None
        alone = sum(len(self.moved[c]) for c in self.unmatched)
        tail = f"; {alone} match no task and have a case of their own" if alone else ""
        return (
            f"{moved} of {self.checked} simulations were graded (reward_info.action_checks) on actions that "
            "differ from the task of the same id in `tasks`: each is scored against the task it was graded "
            f"on, and that case's notes name it{tail}"
        )


def convert(path: Path, options: Options) -> Conversion:
    source = str(_results_file(path))

    def records() -> Iterator[Converted]:
        doc = read_results(path)
        yield from _records(doc, source, Grading(doc))

    doc = read_results(path)
    grading = Grading(doc)
    called: set[str] = set()
    questions: dict[str, str] = {}
    first_bad: InvalidTrajectory | None = None
    for _, traj in _records(doc, source, grading):
        if isinstance(traj, InvalidTrajectory):
            first_bad = first_bad or traj
            continue
        called.update(c.name for c in traj.calls)
        questions.setdefault(traj.case_id, traj.question)
    if not questions and first_bad is not None:  # nothing readable: say why, not that no tool was called
        raise first_bad
    cases: dict[str, dict[str, Any]] = {}
    for task in doc.get("tasks") or ():
        if isinstance(task, Mapping) and isinstance(task.get("id"), (str, int)) and not isinstance(task["id"], bool):
            cid = case_id(task["id"])
            if cid in questions or not questions:
                cases.setdefault(cid, task_case(task, questions.get(cid, "")))
    for cid, actions in grading.unmatched.items():
        cases.setdefault(
            cid, task_case({"id": cid, "evaluation_criteria": {"actions": actions}}, questions.get(cid, ""))
        )
    for cid, question in questions.items():  # a simulation whose task the file does not hold: no reference
        cases.setdefault(cid, {"id": cid, "question": question or f"τ²-bench task {cid}", "tags": ["tau2"]})
    when = policy_time(_info(doc, "environment_info", "policy"))
    bags = bag_allowance_note(_info(doc, "environment_info", "policy"))
    for cid, case in cases.items():
        extra = grading.case_notes(cid)
        if extra:
            case["notes"] = [*extra, *case.get("notes", [])]
        if when:
            case["notes"] = [*case.get("notes", []), POLICY_TIME_NOTE + when]
        if bags:
            case["notes"] = [*case.get("notes", []), _note(BAGS_NOTE + bags)]
    domain = _info(doc, "environment_info", "domain_name")
    name = domain if isinstance(domain, str) and domain.strip() else path.stem
    declared = _tool_defs(_info(doc, "environment_info", "tool_defs"))
    gold = {e["name"] for c in cases.values() for e in c.get("expected_calls") or ()}
    notes: list[str] = []
    if options.tools is None and declared:
        toolset = toolset_document(check_tools(declared, f"{source}: info.environment_info.tool_defs"), name=name)
        notes.append(
            f"no --tools: toolset of the {len(declared)} tools the file declares (info.environment_info.tool_defs)"
        )
    else:
        toolset, more = resolve_toolset(options.tools, options.domain, lambda: called | gold, name=name)
        notes.extend(more)
    notes.extend(add_expected_tools(toolset, gold))
    moved = grading.note()
    if moved:
        notes.append(moved)
    user_calls = sum(
        1
        for s in doc["simulations"]
        if isinstance(s, Mapping)
        for m in s.get("messages") or ()
        if isinstance(m, Mapping) and m.get("role") == "user"
        for _ in m.get("tool_calls") or ()
    )
    if user_calls:
        notes.append(
            f"{user_calls} tool calls are the simulated user's own (requestor: user): kept in the user's "
            "messages, not counted as the agent's"
        )
    suite = {"name": f"tau2 {name}", "toolset": toolset, "cases": list(cases.values())}
    return Conversion(suite=suite, records=records, notes=notes)
