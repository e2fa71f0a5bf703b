"""A BFCL *result* file (what a model answered) as runs, with BFCL's verdict.

``convert --from bfcl RESULT.json --questions DIR``: DIR holds the category's
question file (``BFCL_v4_<category>.json``, the result file's name without
``_result``), its possible answers and, for multi-turn categories,
``multi_turn_func_doc/``. The suites are those of the question file (``bfcl``);
each result line ``{id, result}`` becomes one trajectory of the case ``id``:

- single-turn: ``result`` is the model's text (``"[func(a=1)]"``) or a list of
  ``{func_name: arguments}``; its calls are decoded as BFCL decodes them
  (``bfcl_decode``), and an answer with no call keeps its text as the answer;
- multi-turn: ``result`` holds one entry per user turn, each the model's steps
  (a list of texts or call lists) or one text; each decoded call carries its
  turn, and when BFCL's classes are installed, the result BFCL's execution
  gave it (``Error during execution: …``, or an object with an ``error``
  field as BFCL's classes answer a bad request, is a tool error).

The trajectory's ``reward`` is BFCL's verdict (1 passes, 0 fails): single-turn
by BFCL's own rules (``bfcl_rules``), multi-turn by executing both call lists
on BFCL's classes (``bfcl_state``, the optional ``bfcl-eval`` package; without
it the reward is left out and a note says the verdict is unavailable).
ToolLens's families are scored beside it, per turn; single-turn suites
compare texts as BFCL does (``one_of`` with ``normalize: bfcl``). The notes
give BFCL's pass rate and its failures by kind (and by turn); each case's
notes, BFCL's verdict on its answer and why. BFCL's logged token counts and
latencies are the records' ``model_calls``.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, SuiteError
from app.importers.base import Conversion, Converted, Options, call_error, looks_like_error, record_or_reason
from app.importers.bfcl_decode import Decoded, Undecodable, decode_any
from app.importers.bfcl_files import _is_multi_turn, _lines, _question_text, answers_path

MAX_ITEMS = 100_000  # result lines in one file
MAX_MODEL_CALLS = 5_000  # requests kept per item (the record's bound)
MAX_ANSWER_TEXT = 4_000  # characters of a model's text kept as its answer or message
MAX_NOTE = 600  # characters of BFCL's verdict kept in a case's notes
AGENTIC = "BFCL judges agentic answers by their last message"
UNREAD = {  # categories whose answers BFCL reads otherwise (first match in this order)
    "javascript": "BFCL decodes them with its JavaScript parser",
    "java": "BFCL decodes them with its Java parser",
    "memory": AGENTIC,
    "web_search": AGENTIC,
    "format_sensitivity": "BFCL varies the answer format per item",
}
NO_MESSAGE = "(no new user message: BFCL makes the held-back function available here)"


def is_result(first: Any) -> bool:
    """Whether a file's first record is a model's result (``{id, result}``), not a question."""
    return isinstance(first, Mapping) and "result" in first and "question" not in first


def question_file(result: Path, questions: Path | None, first_id: str) -> Path:
    """The question file of a result file: ``questions`` itself when it is a
    file, else the file of the same name without ``_result`` in that folder (or
    ``*_<category>.json`` there, the category read from the first id)."""
    if questions is None:
        raise SuiteError(
            "a BFCL result file needs its questions: --questions DIR (the folder of the category's "
            "question file, its possible answers and multi_turn_func_doc/)",
            path=str(result),
        )
    if questions.is_file():
        return questions
    if not questions.is_dir():
        raise SuiteError(f"--questions: {questions}: no such file or folder", path=str(result))
    name = result.name.replace("_result", "")
    if (questions / name).is_file():
        return questions / name
    category = first_id.rsplit("_", 1)[0]
    found = sorted(p for p in questions.glob(f"*_{category}.json") if "possible_answer" not in p.name)
    if found:
        return found[-1]
    raise SuiteError(f"--questions {questions}: no {name} (nor *_{category}.json) in it", path=str(result))


def convert_results(
    path: Path, options: Options, convert_questions: Callable[[Path, Options], Conversion]
) -> Conversion:
    """The runs of a result file; ``convert_questions`` reads its question file (``bfcl.convert``)."""
    lines = list(_limited(_lines(path), path))
    if not lines:
        raise SuiteError("no results", path=str(path))
    first = lines[0][1]
    first_id = str(first.get("id", "")) if isinstance(first, Mapping) else ""
    category = first_id.rsplit("_", 1)[0]
    unread = next((kind for kind in UNREAD if kind in category), None)
    if unread is not None:
        raise SuiteError(
            f"BFCL's {category} results are not read: {UNREAD[unread]} (read: the Python single-turn, "
            "relevance and multi-turn categories)",
            path=str(path),
        )
    source = question_file(path, options.questions, first_id)
    questions = {q["id"]: q for _, q in _lines(source) if isinstance(q, Mapping) and isinstance(q.get("id"), str)}
    answers_file = answers_path(source)
    answers: dict[str, Any] = {}
    if answers_file is not None:
        answers = {
            a["id"]: a.get("ground_truth")
            for _, a in _lines(answers_file)
            if isinstance(a, Mapping) and isinstance(a.get("id"), str)
        }
    suites = convert_questions(source, Options())
    multi = _is_multi_turn(next(iter(questions.values()), None), source)
    tally = Tally()
    if multi:
        from app.importers import bfcl_state

        missing = bfcl_state.unavailable()
        records = [_multi_turn(n, r, questions, answers, missing, tally, str(path)) for n, r in lines]
        if missing:
            tally.unavailable = missing
    else:
        records = [_single_turn(n, r, questions, answers, tally, str(path)) for n, r in lines]
        for doc in (suites.suite, *suites.extra_suites):
            bfcl_texts(doc)
    for doc in (suites.suite, *suites.extra_suites):  # each case's note: BFCL's verdict on its answer, and why
        for case in doc.get("cases") or []:
            verdict = tally.verdicts.get(case.get("id"))
            if verdict is not None:
                case["notes"] = [*_as_list(case.get("notes")), verdict]
    notes = [n for n in suites.notes if not n.startswith("multi-turn BFCL: calls are compared")]
    return Conversion(
        suite=suites.suite,
        records=lambda: iter(records),
        extra_suites=suites.extra_suites,
        notes=[*tally.notes(source.name), *notes],
    )


def _as_list(notes: Any) -> list[Any]:
    return [] if notes is None else [notes] if isinstance(notes, str) else list(notes)


def bfcl_texts(suite: dict[str, Any]) -> None:
    """Have the suite compare texts as BFCL does: every ``one_of`` (at any
    depth) gets ``normalize: bfcl``, and a text or list argument without a rule
    gets a ``one_of`` of its one value, so ToolLens's argument family agrees
    with BFCL's verdict on ``"y=x^2"`` for ``"y=x**2"``."""
    for case in suite.get("cases") or []:
        for call in case.get("expected_calls") or []:
            rules = call.setdefault("tolerance", {})
            for name, value in (call.get("arguments") or {}).items():
                if name not in rules and isinstance(value, (str, list)):
                    rules[name] = {"rule": "one_of", "values": [copy.deepcopy(value)]}  # no YAML alias
            for rule in rules.values():
                _normalize(rule)
            if not rules:
                del call["tolerance"]


def _normalize(rule: Any) -> None:
    if not isinstance(rule, dict):
        return
    if rule.get("rule") == "one_of":
        rule["normalize"] = "bfcl"
    for sub in (rule.get("fields") or {}).values():
        _normalize(sub)
    for sub in rule.get("items") or []:
        _normalize(sub)


def _limited(lines: Any, path: Path) -> Any:
    for i, item in enumerate(lines):
        if i >= MAX_ITEMS:
            raise SuiteError(f"more than {MAX_ITEMS} results in one file", path=str(path))
        yield item


class Tally:
    """BFCL's verdicts of one file, for the notes."""

    def __init__(self) -> None:
        self.passed = 0
        self.judged = 0
        self.kinds: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}
        self.turns: Counter[int] = Counter()
        self.unavailable: str | None = None
        self.verdicts: dict[str, str] = {}  # question id -> BFCL's verdict, as the case's note

    def add(self, qid: str, valid: bool, kind: str, turn: int | None = None, error: str = "") -> None:
        self.judged += 1
        at = f" at turn {turn}" if turn is not None else ""
        self.verdicts[qid] = (
            "BFCL's verdict on this answer: passes"
            if valid
            else f"BFCL's verdict on this answer: fails{at}: {kind}: {error}"[:MAX_NOTE]
        )
        if valid:
            self.passed += 1
            return
        self.kinds[kind] += 1
        self.examples.setdefault(kind, []).append(qid)
        if turn is not None:
            self.turns[turn] += 1

    def notes(self, questions: str) -> list[str]:
        if self.unavailable:
            return [
                f"BFCL's verdict is unavailable: {self.unavailable}; the records carry no reward, the calls are "
                f"scored by ToolLens's families only (questions: {questions})"
            ]
        if not self.judged:
            return []
        share = f"{100 * self.passed / self.judged:.1f}%"
        out = [
            f"BFCL's verdict (the records' reward): {self.passed} of {self.judged} pass ({share}); "
            f"questions: {questions}"
        ]
        for kind, count in self.kinds.most_common():
            ids = self.examples[kind]
            more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
            out.append(f"BFCL fails {count}: {kind} ({', '.join(ids[:5])}{more})")
        if self.turns:
            by_turn = ", ".join(f"turn {t}: {n}" for t, n in sorted(self.turns.items()))
            out.append(f"BFCL's first failing turn: {by_turn}")
        return out


def _single_turn(
    line: int, raw: Any, questions: Mapping[str, Any], answers: Mapping[str, Any], tally: Tally, source: str
) -> Converted:
    from app.importers.bfcl_rules import verdict

    qid = raw.get("id") if isinstance(raw, Mapping) else None
    bad = _bad_item(line, raw, qid, questions, source)
    if bad is not None:
        return bad
    assert isinstance(qid, str)
    question = questions[qid]
    category = qid.rsplit("_", 1)[0]
    if "relevance" not in category and qid not in answers:  # (ir)relevance has no possible answers
        return line, InvalidTrajectory(f"no possible answer for {qid!r}", index=line, field="id", source=source)
    functions = question.get("function") if isinstance(question.get("function"), list) else []
    result = raw.get("result")
    try:
        judged, decoded = verdict(category, functions, result, answers.get(qid))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as exc:
        return line, InvalidTrajectory(
            f"cannot judge this result ({type(exc).__name__})", index=line, field="result", source=source
        )
    tally.add(qid, judged.valid, judged.error_type, error=judged.error)
    calls = [{"name": name, "arguments": _jsonable(args)} for call in decoded or [] for name, args in call.items()]
    answer = "" if calls else _text(result)
    data = {
        "case_id": qid,
        "question": _question_text(question.get("question")) or qid,
        "calls": calls,
        "answer": answer,
        "reward": 1.0 if judged.valid else 0.0,
    }
    return record_or_reason(line, lambda: _with_usage(data, raw), source=source, what="BFCL result")


def _multi_turn(
    line: int,
    raw: Any,
    questions: Mapping[str, Any],
    answers: Mapping[str, Any],
    missing: str | None,
    tally: Tally,
    source: str,
) -> Converted:
    from app.importers import bfcl_state
    from app.importers.bfcl_multi_turn import _user_text

    qid = raw.get("id") if isinstance(raw, Mapping) else None
    bad = _bad_item(line, raw, qid, questions, source)
    if bad is not None:
        return bad
    assert isinstance(qid, str)
    question = questions[qid]
    turns = raw.get("result")
    truth = answers.get(qid)
    if not isinstance(turns, list):
        return line, InvalidTrajectory(
            "a multi-turn result is a list with one entry per user turn", index=line, field="result", source=source
        )
    if not isinstance(truth, list) or not all(isinstance(t, list) for t in truth):
        return line, InvalidTrajectory(f"no possible answer for {qid!r}", index=line, field="id", source=source)
    reward: float | None = None
    executed: list[bfcl_state.Step] | None = None
    if missing is None:
        try:
            judged = bfcl_state.judge(question, turns, truth)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            return line, InvalidTrajectory(
                f"BFCL's classes cannot run this question ({type(exc).__name__}: {str(exc)[:200]})",
                index=line,
                field="id",
                source=source,
            )
        tally.add(qid, judged.valid, judged.error_type, judged.turn, judged.error)
        reward = 1.0 if judged.valid else 0.0
        executed = judged.steps
    user_turns = question.get("question") if isinstance(question.get("question"), list) else []
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results = iter(executed or [])
    for t, turn in enumerate(turns, start=1):
        user = _user_text(user_turns[t - 1]) if t - 1 < len(user_turns) else ""
        messages.append({"role": "user", "content": user or NO_MESSAGE, "calls_before": len(calls)})
        for step in bfcl_state.steps_of(turn):
            decoded = _decoded(step)
            if decoded is None:
                if _text(step):
                    messages.append({"role": "assistant", "content": _text(step), "calls_before": len(calls)})
                continue
            for call in decoded:
                for name, args in call.items():
                    entry: dict[str, Any] = {"name": name, "arguments": _jsonable(args), "turn": min(t, 1000)}
                    done = next(results, None) if executed is not None else None
                    if done is not None:
                        entry["observation"] = done.result[:MAX_ANSWER_TEXT]
                        if done.result.startswith("Error during execution") or looks_like_error(done.result):
                            entry["error"] = call_error(done.result[:MAX_ANSWER_TEXT])
                    calls.append(entry)
    first = messages[0]["content"] if messages else qid
    data = {"case_id": qid, "question": first, "calls": calls, "answer": "", "messages": messages}
    if reward is not None:
        data["reward"] = reward
    return record_or_reason(line, lambda: _with_usage(data, raw), source=source, what="BFCL result")


def _with_usage(data: dict[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """The record with the requests BFCL logged (``input_token_count``,
    ``output_token_count``, ``latency`` in seconds: numbers for a single-turn
    item, lists per turn and step for multi-turn), one model call per step."""
    counts = [_flat(raw.get(k)) for k in ("input_token_count", "output_token_count", "latency")]
    steps = min(max(len(c) for c in counts), MAX_MODEL_CALLS)
    calls = []
    for i in range(steps):
        tokens_in, tokens_out, seconds = (c[i] if i < len(c) else None for c in counts)
        entry: dict[str, Any] = {}
        if tokens_in is not None:
            entry["input_tokens"] = int(tokens_in)
        if tokens_out is not None:
            entry["output_tokens"] = int(tokens_out)
        if seconds is not None:
            entry["latency_ms"] = round(seconds * 1000, 3)
        calls.append(entry)
    if any(calls):
        data["model_calls"] = calls
    return data


def _flat(value: Any, depth: int = 0) -> list[float | None]:
    """BFCL's count or list of counts (nested per turn and step), flat; a value
    that is no count (negative, not a number) is None, keeping the positions."""
    if isinstance(value, list) and depth < 3:
        return [v for item in value[:MAX_MODEL_CALLS] for v in _flat(item, depth + 1)]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or value >= 2**53
    ):
        return [None] if value is not None or depth else []
    return [float(value)]


def _decoded(step: Any) -> Decoded | None:
    """A step's calls as BFCL executes them (``bfcl_state``'s reading), None when none."""
    from app.importers.bfcl_state import step_calls

    return step_calls(step)


def _bad_item(line: int, raw: Any, qid: Any, questions: Mapping[str, Any], source: str) -> Converted | None:
    if not isinstance(raw, Mapping) or "result" not in raw:
        return line, InvalidTrajectory("expected {id, result}", index=line, source=source)
    if not isinstance(qid, str):
        return line, InvalidTrajectory("expected an id (text)", index=line, field="id", source=source)
    if qid not in questions:
        return line, InvalidTrajectory(
            f"no question {qid!r} in the question file", index=line, field="id", source=source
        )
    return None


def _text(value: Any) -> str:
    """A model's answer as text (bounded)."""
    if isinstance(value, str):
        return value.strip()[:MAX_ANSWER_TEXT]
    return "" if value is None else repr(value)[:MAX_ANSWER_TEXT]


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A decoded value as JSON: tuples as lists, what JSON cannot hold as its text."""
    if depth > 32:
        return "(nested deeper than 32 levels)"
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    try:
        return repr(value)[:MAX_ANSWER_TEXT]
    except (RecursionError, ValueError):
        return f"({type(value).__name__})"


__all__ = ["Undecodable", "bfcl_texts", "convert_results", "decode_any", "is_result", "question_file"]
