"""``toolbench``: ToolBench answer files (a run per file, one pretty-printed
JSON object; a folder of them; or JSON Lines / a JSON array of runs).

A run is ``{win, tree, answer_generation: {query, function, train_messages,
final_answer, finish_type, ...}}``. The tools are ``function`` (without the
``Finish`` pseudo-tool); the calls come from the last (longest) list of
``train_messages``, legacy ``function_call`` / ``role: function`` messages.
``Finish`` is not a call but the end of the run: ``give_answer`` gives the
answer (its ``final_answer``), ``give_up_and_restart`` is an honest give-up
(``stopped: "gave_up"``, the answer is the agent's last text). An
observation is ``{"error", "response"}``: a non-empty ``error`` is a tool
error, the ``response`` is what the agent read. ``win`` is the reward.

A run without ``train_messages`` (one that never reached an answer) is read
from its search tree: the last chain the search expanded; a chain cut at the
step limit ends ``stopped: "step_limit"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, SuiteError, ToolSpecError
from app.core.records import MAX_NAME, loads, parse_record
from app.core.suites.tools import ToolSpec
from app.core.usage import MAX_TOKENS
from app.importers.base import Conversion, Converted, Options, call_error, content_text
from app.importers.jsonstream import iter_json_values
from app.importers.toolsets import OPEN_SCHEMA, resolve_toolset, toolset_document

NAME = "toolbench"
FINISH = "Finish"
MAX_FILES = 100_000
_QUERY_ID = re.compile(r"(?:^|_)(\d+)_")
_ERROR_FIELD = re.compile(r'\s*\{\s*"error"\s*:\s*("(?:[^"\\]|\\.)*")')


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        if len(files) > MAX_FILES:
            raise SuiteError(f"more than {MAX_FILES} files in the folder", path=str(path))
        return files
    if not path.is_file():
        raise InvalidTrajectory("file not found", source=str(path))
    return [path]


def _is_answer(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("answer_generation"), Mapping)


def _messages(value: Mapping[str, Any]) -> tuple[list[Any], str | None]:
    """The run's messages: the last list of ``train_messages`` (each list is
    the one before plus the next step), or the tree's last chain; and why the
    chain stopped when it is cut short."""
    train = value["answer_generation"].get("train_messages")
    if isinstance(train, list) and train:
        lists = [t for t in train if isinstance(t, list)]
        if lists:
            return max(lists, key=len), None
        return train, None
    tree = value.get("tree")
    if isinstance(tree, Mapping) and isinstance(tree.get("tree"), Mapping):
        return _last_chain(tree["tree"])
    return [], None


def _last_chain(root: Mapping[str, Any]) -> tuple[list[Any], str | None]:
    """The chain to the node the search expanded last, as legacy messages
    (a Thought is assistant text, an Action and its Action Input a call and
    its result). Walked without recursion: the tree is untrusted."""
    seen: list[tuple[Mapping[str, Any], int]] = []  # (node, index of its parent)
    stack: list[tuple[Mapping[str, Any], int]] = [(root, -1)]
    best, best_order = -1, -1
    while stack:
        node, parent = stack.pop()
        seen.append((node, parent))
        order = node.get("expand_num")
        if node.get("node_type") == "Action Input" and type(order) is int and order > best_order:
            best, best_order = len(seen) - 1, order
        children = node.get("children")
        if isinstance(children, list):
            stack.extend((child, len(seen) - 1) for child in children if isinstance(child, Mapping))
    if best < 0:
        return [], None
    chain: list[Mapping[str, Any]] = []
    at = best
    while at >= 0:
        chain.append(seen[at][0])
        at = seen[at][1]
    chain.reverse()
    messages: list[Any] = []
    action = ""
    for node in chain:
        kind, text = node.get("node_type"), node.get("description")
        text = text if isinstance(text, str) else ""
        if kind == "Thought":
            messages.append({"role": "assistant", "content": text})
        elif kind == "Action":
            action = text
        elif kind == "Action Input" and action:
            messages.append(
                {"role": "assistant", "content": None, "function_call": {"name": action, "arguments": text}}
            )
            if action != FINISH:
                messages.append({"role": "function", "name": action, "content": node.get("observation")})
    return messages, "step_limit" if chain[-1].get("pruned") is True and action != FINISH else None


def _observation(call: dict[str, Any], content: Any) -> None:
    """``{"error": ..., "response": ...}``: a non-empty error is a tool error."""
    text = content_text(content)
    try:
        data = loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        data = None
    if isinstance(data, Mapping) and ("error" in data or "response" in data):
        response = data.get("response")
        call["observation"] = response if isinstance(response, str) else content_text(response)
        error = data.get("error")
        if error:
            call["error"] = call_error(str(error))
    else:  # ToolBench cuts long observations ("...") and the JSON with them: read the error field alone
        call["observation"] = text
        head = _ERROR_FIELD.match(text)
        try:
            error = loads(head[1]) if head is not None else None
        except ValueError:
            error = head[1] if head is not None else None
        if error:
            call["error"] = call_error(str(error))


def _finish(arguments: Any) -> Mapping[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, Mapping) else {}


def run_to_record(value: Mapping[str, Any], case_id: str) -> dict[str, Any]:
    """The trajectory-record fields of one ToolBench run."""
    ag = value["answer_generation"]
    calls: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    text = ""
    answer: str | None = None
    messages, stopped = _messages(value)
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role == "assistant":
            said = content_text(m.get("content"))
            if said.strip():
                text = said
            fc = m.get("function_call")
            if not isinstance(fc, Mapping):
                continue
            name = fc.get("name") if isinstance(fc.get("name"), str) else ""
            if name == FINISH:
                finish = _finish(fc.get("arguments"))
                if finish.get("return_type") == "give_up_and_restart":
                    stopped = "gave_up"
                else:
                    final = finish.get("final_answer")
                    answer = final if isinstance(final, str) else content_text(final)
                break
            call = {"name": name, "arguments": fc.get("arguments"), "observation": None, "error": None}
            calls.append(call)
            pending.append(call)
        elif role == "function":
            found = next((c for c in pending if c["name"] == m.get("name")), pending[0] if pending else None)
            if found is not None:
                pending.remove(found)
                _observation(found, m.get("content"))
    query = ag.get("query")
    data: dict[str, Any] = {
        "case_id": case_id,
        "question": query if isinstance(query, str) else "",
        "calls": calls,
        "answer": text if answer is None else answer,
    }
    if stopped is not None:
        data["stopped"] = stopped
    tokens = ag.get("total_tokens")
    if type(tokens) is int and 0 <= tokens < MAX_TOKENS:  # the whole run's, without an input/output split
        data["model_calls"] = [{"total_tokens": tokens}]
    win = value.get("win")
    if isinstance(win, bool):
        data["reward"] = 1.0 if win else 0.0
    return data


def _case_id(value: Mapping[str, Any], file: Path, line: int, single: bool) -> str:
    for key in ("query_id", "id"):
        found = value.get(key, value["answer_generation"].get(key))
        if isinstance(found, (str, int)) and not isinstance(found, bool) and str(found):
            return f"query-{found}"[:MAX_NAME]
    if single and (m := _QUERY_ID.search(file.stem)):
        return f"query-{m[1]}"
    return f"{file.stem}:line-{line}"[:MAX_NAME] if not single else file.stem[:MAX_NAME]


def convert(path: Path, options: Options) -> Conversion:
    files = _files(path)
    folder = path.is_dir()
    notes: list[str] = []

    def runs() -> Iterator[tuple[Path, int, Any, bool]]:
        """(file, line, value, whether the file holds one run) of every run;
        in a folder, files without any ToolBench answer are passed over."""
        for file in files:
            values = list(iter_json_values(file, whole_object=True))
            if folder and not any(_is_answer(v) or isinstance(v, InvalidTrajectory) for _, v in values):
                continue  # another kind of file beside the answers (ToolBench's instruction file)
            for line, value in values:
                yield file, line, value, len(values) == 1

    def records() -> Iterator[Converted]:
        trials: dict[str, int] = {}
        for file, line, value, single in runs():
            source = str(file)
            if isinstance(value, InvalidTrajectory):
                yield line, value
                continue
            if not _is_answer(value):
                yield (
                    line,
                    InvalidTrajectory(
                        "not a ToolBench answer: required, an object",
                        index=line,
                        field="answer_generation",
                        source=source,
                    ),
                )
                continue
            try:
                data = run_to_record(value, _case_id(value, file, line, single))
                data["trial"] = trials.get(data["case_id"], 0)
                trials[data["case_id"]] = data["trial"] + 1
                yield line, parse_record(data, index=line, source=source)
            except InvalidTrajectory as exc:
                yield line, exc
            except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a shape no rule expected
                yield (
                    line,
                    InvalidTrajectory(f"cannot read this run ({type(exc).__name__}: {exc})", index=line, source=source),
                )

    declared: dict[str, dict[str, Any]] = {}
    cases: dict[str, dict[str, Any]] = {}
    called: set[str] = set()
    skipped = [f.name for f in files]
    for file, line, value, single in runs():
        if file.name in skipped:
            skipped.remove(file.name)
        if not _is_answer(value):
            continue
        for tool in value["answer_generation"].get("function") or ():
            if isinstance(tool, Mapping) and tool.get("name") != FINISH and isinstance(tool.get("name"), str):
                declared.setdefault(tool["name"], _contract(tool, notes))
        case_id = _case_id(value, file, line, single)
        query = value["answer_generation"].get("query")
        cases.setdefault(
            case_id,
            {
                "id": case_id,
                "question": query if isinstance(query, str) and query.strip() else case_id,
                "tags": ["toolbench"],
            },
        )
        called.update(c["name"] for c in run_to_record(value, case_id)["calls"])
    if not cases:
        raise SuiteError("no ToolBench answer found (objects with 'answer_generation')", path=str(path))
    if skipped and folder:
        notes.append(f"{len(skipped)} files hold no ToolBench answer and were passed over: {', '.join(skipped[:5])}")
    if options.tools is not None or not declared:
        toolset, more = resolve_toolset(options.tools, options.domain, lambda: called, name=path.stem)
        notes.extend(more)
    else:
        toolset = toolset_document(list(declared.values()), name=path.stem)
        unknown = called - declared.keys()
        if unknown:
            notes.append(
                f"{len(unknown)} called tool names are not among the tools offered "
                f"(they count as hallucinated tools): {', '.join(sorted(unknown)[:5])}"
            )
    suite = {"name": f"toolbench {path.stem}", "toolset": toolset, "cases": list(cases.values())}
    return Conversion(suite=suite, records=records, notes=notes)


def _contract(tool: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    try:
        spec = ToolSpec.from_dict(tool)
        _ = spec.validator
        return spec.contract()
    except ToolSpecError as exc:
        notes.append(f"tool {tool['name']!r}: its schema cannot be read ({exc}): any arguments are accepted")
        description = tool.get("description")
        return {
            "name": tool["name"],
            "description": description if isinstance(description, str) else "",
            "parameters": dict(OPEN_SCHEMA),
        }
