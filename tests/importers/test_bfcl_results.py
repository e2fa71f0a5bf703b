"""BFCL result files (what a model answered) as runs: calls decoded as BFCL
decodes them (``ast`` only, nothing run), BFCL's verdict as the reward, and
ToolLens's families beside it. Real values from AIREV-Agent-0.8B's result
files, read by hand; the verdicts' agreement with bfcl-eval's own checker is
held in test_bfcl_agreement.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import Trajectory, read_jsonl
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite_check import validate_suite_file
from app.importers import Conversion, Options, convert
from app.importers.bfcl_decode import Undecodable, decode, decode_any
from app.importers.bfcl_rules import standardize, verdict
from app.importers.writer import write_conversion
from tests.resources import DATA, require_module, shared_data

BFCL = DATA / "bfcl"
RESULTS = BFCL / "results" / "AIREV-Agent-0.8B"


def records(conversion: Conversion) -> dict[str, Trajectory]:
    out = {}
    for _, item in conversion.records():
        assert isinstance(item, Trajectory), item
        out[item.case_id] = item
    return out


def test_answers_decode_as_bfcl_decodes_them_and_nothing_runs() -> None:
    assert decode('[f(a=1, b="x"), g.h(c=[1, 2.5])]') == [{"f": {"a": 1, "b": "x"}}, {"g.h": {"c": [1, 2.5]}}]
    assert decode("f(a=1)") == [{"f": {"a": 1}}]  # wrapped in [...] as BFCL does
    assert decode("```\n[f(a=b)]\n```") == [{"f": {"a": "b"}}]  # a bare name is its text
    assert decode("[diff('a.txt', 'b.txt')]") == [{"diff": {}}]  # BFCL drops positional arguments
    assert decode("[f(a=-5, b=2*3, c=(1, 2))]") == [{"f": {"a": -5, "b": 6, "c": (1, 2)}}]
    # a call inside an argument is its text: never run
    assert decode("[f(a=__import__('os').system('touch /tmp/x'))]") == [
        {"f": {"a": "__import__('os').system('touch /tmp/x')"}}
    ]
    for text in (
        "No function matches the user's request.",
        '[cat file_name="x.txt"]',
        "[f(a=9**9**9)]",
        "[f(a=x + 1)]",
        "[f(**kw)]",
        "[1, 2]",
        "[f(a=1)]" + " " * 100_000,
    ):
        with pytest.raises(Undecodable):
            decode(text)
    # a function-calling model's result: a list of {name: arguments}, the arguments an object or its JSON
    assert decode_any([{"f": '{"a": 1}'}, {"g": {"b": [2]}}]) == [{"f": {"a": 1}}, {"g": {"b": [2]}}]
    with pytest.raises(Undecodable):
        decode_any([{"f": "not json"}])


def test_bfcl_normalises_strings_and_accepts_integers_for_floats() -> None:
    assert standardize("y = x^2") == standardize("y=x**2") == "y=x2"
    assert standardize("4x + 7") == standardize("4x+7")
    assert standardize("April 1, 2024") == standardize("april 1 2024")
    tool = {
        "name": "area",
        "parameters": {
            "type": "dict",
            "required": ["function", "interval"],
            "properties": {
                "function": {"type": "string"},
                "interval": {"type": "array", "items": {"type": "float"}},
                "scale": {"type": "float"},
                "exact": {"type": "boolean"},
            },
        },
    }
    truth = [{"area": {"function": ["x**2"], "interval": [[1.0, 3.0]], "scale": [2.0, ""], "exact": [True, ""]}}]
    ok, _ = verdict("simple_python", [tool], '[area(function="X^2", interval=[1.0, 3.0], scale=2)]', truth)
    assert ok.valid
    bad, _ = verdict("simple_python", [tool], '[area(function="x^3", interval=[1.0, 3.0])]', truth)
    assert (bad.valid, bad.error_type) == (False, "value_error:string")
    typed, _ = verdict("simple_python", [tool], '[area(function="x**2", interval=[1.0, 3.0], exact="true")]', truth)
    assert (typed.valid, typed.error_type) == (False, "type_error:simple")
    # integers in a float array: BFCL's nested type check refuses them unless the possible answer has integers
    ints, _ = verdict("simple_python", [tool], '[area(function="x**2", interval=[1, 3])]', truth)
    assert (ints.valid, ints.error_type) == (False, "type_error:nested")
    truth_ints = [{"area": {"function": ["x**2"], "interval": [[1, 3]]}}]
    assert verdict("simple_python", [tool], '[area(function="x**2", interval=[1, 3])]', truth_ints)[0].valid
    missing, _ = verdict("simple_python", [tool], '[area(function="x**2")]', truth)
    assert missing.error_type == "simple_function_checker:missing_required"
    none, calls = verdict("irrelevance", [tool], "No function matches the user's request.", None)
    assert none.valid and calls is None


@shared_data(RESULTS / "BFCL_v4_simple_python_result.json", RESULTS / "BFCL_v4_irrelevance_result.json")
def test_single_turn_results_carry_bfcls_verdict() -> None:
    conversion = convert("bfcl", RESULTS / "BFCL_v4_simple_python_result.json", Options(questions=BFCL))
    runs = records(conversion)
    assert len(runs) == 400 and sum(r.reward == 1.0 for r in runs.values()) == 299
    assert conversion.notes[0] == (
        "BFCL's verdict (the records' reward): 299 of 400 pass (74.8%); questions: BFCL_v4_simple_python.json"
    )
    # "y=x^2" for a possible answer "y=x**2": BFCL's normalisation accepts it
    first = runs["simple_python_13"]
    assert first.reward == 1.0 and first.question.startswith("Calculate the area under the curve y=x^2")
    assert [(c.name, c.arguments) for c in first.calls] == [
        ("calculate_area_under_curve", {"function": "y=x^2", "interval": [1.0, 3.0], "method": "trapezoidal"})
    ]
    # formatted="true" (a string) for a boolean: a type error in BFCL
    assert runs["simple_python_17"].reward == 0.0
    cases = {c["id"]: c for doc in (conversion.suite, *conversion.extra_suites) for c in doc["cases"]}
    assert cases["simple_python_17"]["notes"] == [
        "BFCL's verdict on this answer: fails: type_error:simple: Incorrect type for parameter 'formatted'. Expected "
        "type boolean, got str. Parameter value: 'true'."
    ]
    assert cases["simple_python_13"]["notes"] == ["BFCL's verdict on this answer: passes"]
    assert any(n.startswith("BFCL fails 37: type_error:simple (simple_python_17,") for n in conversion.notes)
    irrelevance = records(convert("bfcl", RESULTS / "BFCL_v4_irrelevance_result.json", Options(questions=BFCL)))
    declined = irrelevance["irrelevance_0"]
    assert (declined.reward, declined.calls, declined.answer) == (1.0, [], "No function matches the user's request.")
    called = irrelevance["irrelevance_3"]
    assert called.reward == 0.0 and [c.name for c in called.calls] == ["find_critical_points"]


@shared_data(RESULTS / "BFCL_v4_multi_turn_base_result.json", BFCL / "multi_turn_func_doc")
def test_multi_turn_results_run_on_bfcls_classes() -> None:
    require_module(
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system",
        "pip install --no-deps bfcl-eval==2026.3.23 mpmath (docs/importers.md#bfcl)",
    )
    conversion = convert("bfcl", RESULTS / "BFCL_v4_multi_turn_base_result.json", Options(questions=BFCL))
    runs = records(conversion)
    assert len(runs) == 200 and sum(r.reward == 1.0 for r in runs.values()) == 3
    assert (
        "BFCL's first failing turn: turn 1: 157, turn 2: 29, turn 3: 7, turn 4: 2, turn 5: 1, turn 6: 1"
        in conversion.notes
    )
    # multi_turn_base_1, read by hand: `cat` of a file that is not there, then `pwd`, in turn 1 (BFCL's
    # ground truth there is ls(a=True), whose result the model never gets)
    run = runs["multi_turn_base_1"]
    assert run.reward == 0.0
    assert [(c.turn, c.name) for c in run.calls] == [(1, "cat"), (1, "pwd"), (2, "mv"), (3, "grep"), (4, "tail")]
    cat, pwd = run.calls[0], run.calls[1]
    assert cat.observation == '{"error": "cat: \'current directory\': No such file or directory"}'
    assert cat.error is not None and not cat.error.injected
    assert (pwd.observation, pwd.error) == ('{"current_working_directory": "/alex"}', None)
    assert [m.calls_before for m in run.messages or []] == [0, 2, 3, 4]
    # each case's notes say BFCL's verdict on its answer and why (the trajectory page shows them)
    cases = {c["id"]: c for doc in (conversion.suite, *conversion.extra_suites) for c in doc["cases"]}
    assert cases["multi_turn_base_1"]["notes"] == [
        "BFCL's verdict on this answer: fails at turn 1: multi_turn:execution_response_mismatch: Model response "
        "execution results so far does not contain all the ground truth response execution results for turn 1 "
        '(missing: [\'{"current_directory_content": ["workspace"]}\']).'
    ]
    # a turn with no call: the model's text is its message
    said = [m.content for m in runs["multi_turn_base_0"].messages or [] if m.role == "assistant"]
    assert said[0] == "No function matches the user's request."


@shared_data(RESULTS / "BFCL_v4_multi_turn_base_result.json", BFCL / "multi_turn_func_doc")
def test_multi_turn_without_bfcl_eval_converts_and_says_the_verdict_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.importers import bfcl_state

    monkeypatch.setattr(bfcl_state, "_PREFIX", "no_such_package_for_toollens_tests.func_source_code")
    conversion = convert("bfcl", RESULTS / "BFCL_v4_multi_turn_base_result.json", Options(questions=BFCL))
    assert conversion.notes[0].startswith("BFCL's verdict is unavailable: bfcl-eval is not installed")
    assert "pip install --no-deps bfcl-eval mpmath" in conversion.notes[0]
    run = records(conversion)["multi_turn_base_1"]
    assert run.reward is None and [(c.turn, c.name, c.observation) for c in run.calls][:2] == [
        (1, "cat", None),
        (1, "pwd", None),
    ]


@shared_data(RESULTS / "BFCL_v4_parallel_multiple_result.json")
def test_the_written_runs_score_with_bfcls_verdict_as_the_pass(tmp_path: Path) -> None:
    written = write_conversion(
        convert("bfcl", RESULTS / "BFCL_v4_parallel_multiple_result.json", Options(questions=BFCL)), tmp_path
    )
    assert written.records == 200 and len(written.suites) == 3
    passed = scored = 0
    for path in written.suites:
        suite, _ = validate_suite_file(path, lenient=True)  # two possible answers break their own schema
        report = score_trajectories(suite, [r for r in read_jsonl(written.trajectories) if r.case_id in suite.by_id])
        cases = report.to_json()["cases"]
        scored += len(cases)
        passed += sum(1 for c in cases if c["passed"])
    assert (scored, passed) == (200, 112)


def test_bad_result_lines_are_named_and_questions_are_required(tmp_path: Path) -> None:
    questions = tmp_path / "BFCL_v4_simple_python.json"
    questions.write_text(
        json.dumps(
            {
                "id": "simple_python_0",
                "question": [[{"role": "user", "content": "2+2?"}]],
                "function": [
                    {
                        "name": "add",
                        "parameters": {"type": "dict", "required": ["a"], "properties": {"a": {"type": "integer"}}},
                    }
                ],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    (tmp_path / "BFCL_v4_simple_python.possible_answer.json").write_text(
        json.dumps({"id": "simple_python_0", "ground_truth": [{"add": {"a": [4]}}]}) + "\n", encoding="utf-8"
    )
    result = tmp_path / "out" / "BFCL_v4_simple_python_result.json"
    result.parent.mkdir()
    result.write_text(
        "\n".join(
            json.dumps(x)
            for x in (
                {
                    "id": "simple_python_0",
                    "result": "[add(a=4)]",
                    "input_token_count": 120,
                    "output_token_count": 8,
                    "latency": 0.52,
                },
                {"id": "simple_python_9", "result": "[add(a=1)]"},
                {"id": "simple_python_0", "result": ["not a call"]},
                {"result": "[add(a=4)]"},
            )
        )
        + "\n",
        encoding="utf-8",
    )
    conversion = convert("bfcl", result, Options(questions=tmp_path))
    got = list(conversion.records())
    assert isinstance(got[0][1], Trajectory) and got[0][1].reward == 1.0
    assert got[0][1].to_dict()["model_calls"] == [{"input_tokens": 120, "output_tokens": 8, "latency_ms": 520.0}]
    assert isinstance(got[2][1], Trajectory) and got[2][1].reward == 0.0  # undecodable: BFCL fails it
    bad = {line: item.detail for line, item in got if isinstance(item, InvalidTrajectory)}
    assert bad == {2: "no question 'simple_python_9' in the question file", 4: "expected an id (text)"}
    with pytest.raises(InvalidTrajectory, match="2 bad records, nothing written"):
        write_conversion(conversion, tmp_path / "written")
    assert not (tmp_path / "written" / "trajectories.jsonl").exists()
    with pytest.raises(SuiteError, match="a BFCL result file needs its questions: --questions DIR"):
        convert("bfcl", result, Options())
    with pytest.raises(SuiteError, match="--questions goes with a BFCL result file"):
        convert("bfcl", questions, Options(questions=tmp_path))


@shared_data(RESULTS / "BFCL_v4_simple_python_result.json", RESULTS / "BFCL_v4_parallel_multiple_result.json")
def test_the_argument_family_compares_texts_as_bfcl_does(tmp_path: Path) -> None:
    """Every item BFCL passes passes ToolLens's families too (before, 11 failed on arguments: ``"y=x^2"`` for
    ``"y=x**2"``); what BFCL refuses and no family checks is an argument its possible answers do not name."""
    silent: list[str] = []
    for category, bfcl_passes in (("simple_python", 299), ("parallel_multiple", 112)):
        written = write_conversion(
            convert("bfcl", RESULTS / f"BFCL_v4_{category}_result.json", Options(questions=BFCL)), tmp_path / category
        )
        cases = []
        for path in written.suites:
            suite, _ = validate_suite_file(path, lenient=True)
            mine = [r for r in read_jsonl(written.trajectories) if r.case_id in suite.by_id]
            cases += score_trajectories(suite, mine).to_json()["cases"]
        assert sum(1 for c in cases if c["passed"]) == bfcl_passes
        assert [c["case_id"] for c in cases if c["passed"] and c["failures"]] == []
        silent += sorted(c["case_id"] for c in cases if not c["passed"] and not c["failures"])
    assert silent == [
        "parallel_multiple_12",
        "parallel_multiple_177",
        "parallel_multiple_68",
        "parallel_multiple_72",
        "parallel_multiple_75",
    ]
    suite, _ = validate_suite_file(tmp_path / "simple_python" / "suite.yaml", lenient=True)
    area = next(c for c in suite.cases if c.id == "simple_python_13").expected_calls[0]  # type: ignore[index]
    assert area.tolerance["function"].normalize == "bfcl"  # type: ignore[index]


@shared_data(RESULTS / "BFCL_v4_irrelevance_result.json")
def test_convert_command_reads_a_result_file_with_its_questions(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    runner = CliRunner()
    done = runner.invoke(
        cli,
        [
            "convert",
            "--from",
            "bfcl",
            str(RESULTS / "BFCL_v4_irrelevance_result.json"),
            "--questions",
            str(BFCL),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert "BFCL's verdict (the records' reward): 123 of 240 pass (51.2%)" in done.output
    assert "(240 trajectories, 118 calls)" in done.output
    refused = runner.invoke(
        cli,
        [
            "convert",
            "--from",
            "bfcl",
            str(RESULTS / "BFCL_v4_irrelevance_result.json"),
            "--out",
            str(tmp_path / "none"),
        ],
    )
    assert refused.exit_code == 2 and "needs its questions: --questions DIR" in refused.output
    assert not (tmp_path / "none").exists()


@shared_data(BFCL / "BFCL_v4_multi_turn_base.json", BFCL / "multi_turn_func_doc")
def test_every_multi_turn_result_shape_bfcl_writes(tmp_path: Path) -> None:
    """multi_turn_base_1's ground truth answered by the model in each shape BFCL writes: a turn as one text,
    as a list of step texts, or as a list of steps that are function-calling lists; each passes BFCL's check.
    A file cut short (a turn fewer) fails as BFCL's force-terminated run."""
    require_module(
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.gorilla_file_system",
        "pip install --no-deps bfcl-eval==2026.3.23 mpmath (docs/importers.md#bfcl)",
    )
    truth = [
        [("ls", {"a": True})],
        [("cd", {"folder": "workspace"}), ("mv", {"source": "log.txt", "destination": "archive"})],
        [("cd", {"folder": "archive"}), ("grep", {"file_name": "log.txt", "pattern": "Error"})],
        [("tail", {"file_name": "log.txt", "lines": 20})],
    ]

    def text(name: str, args: dict[str, object]) -> str:
        return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"

    shapes = {
        "one text": [f"[{', '.join(text(n, a) for n, a in turn)}]" for turn in truth],
        "step texts": [[f"[{text(n, a)}]" for n, a in turn] + ["Done."] for turn in truth],
        "function-calling steps": [[[{n: json.dumps(a)}] for n, a in turn] for turn in truth],
        "cut short": [f"[{', '.join(text(n, a) for n, a in turn)}]" for turn in truth[:3]],
    }
    result = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    for shape, turns in shapes.items():
        usage = {
            "input_token_count": [[900, 950], [1000], [], [1100]],
            "output_token_count": [[20, 5], [30], [], [9]],
            "latency": [[1.5, 0.25], [2.0], [], [1.0]],
        }  # per turn, per step, as BFCL logs them
        result.write_text(json.dumps({"id": "multi_turn_base_1", "result": turns, **usage}) + "\n", encoding="utf-8")
        conversion = convert("bfcl", result, Options(questions=BFCL))
        run = records(conversion)["multi_turn_base_1"]
        if shape == "cut short":
            assert (
                run.reward == 0.0
                and "BFCL fails 1: multi_turn:force_terminated (multi_turn_base_1)" in conversion.notes
            )
            continue
        assert run.reward == 1.0, (shape, conversion.notes)
        assert [(c.turn, c.name) for c in run.calls] == [
            (1, "ls"),
            (2, "cd"),
            (2, "mv"),
            (3, "cd"),
            (3, "grep"),
            (4, "tail"),
        ], shape
        assert all(c.error is None for c in run.calls), shape
        assert [(m.input_tokens, m.output_tokens, m.latency_ms) for m in run.model_calls or []] == [
            (900, 20, 1500.0),
            (950, 5, 250.0),
            (1000, 30, 2000.0),
            (1100, 9, 1000.0),
        ]


@pytest.mark.parametrize(
    ("qid", "why"),
    [
        ("simple_java_0", "with its Java parser"),
        ("simple_javascript_3", "with its JavaScript parser"),
        ("memory_kv_1-customer-1", "by their last message"),
    ],
)
def test_categories_bfcl_reads_otherwise_are_refused_by_name(tmp_path: Path, qid: str, why: str) -> None:
    result = tmp_path / "BFCL_v4_x_result.json"
    result.write_text(json.dumps({"id": qid, "result": "[f(a=1)]"}) + "\n", encoding="utf-8")
    with pytest.raises(SuiteError, match=f"results are not read: BFCL (decodes them|judges agentic answers) {why}"):
        convert("bfcl", result, Options(questions=tmp_path))


def test_bfcls_classes_run_bounded_and_leave_the_process_as_it_was() -> None:
    """MathAPI sets Decimal's and mpmath's precision for the whole process, and ``power`` would run for ever on a
    huge exponent: the precision is restored after each call, a huge exponent or precision is not run."""
    require_module(
        "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api",
        "pip install --no-deps bfcl-eval==2026.3.23 mpmath (docs/importers.md#bfcl)",
    )
    import decimal

    import mpmath

    from app.importers.bfcl_state import Instances

    math = Instances(["MathAPI"], {})
    before = (decimal.getcontext().prec, mpmath.mp.dps)
    assert math.call("power", {"base": 2, "exponent": 10}) == '{"result": 1024}'
    assert math.call("power", {"base": 10, "exponent": 10**9}).startswith("Error during execution: not run by")
    assert (
        math.call("logarithm", {"value": 2, "base": 10, "precision": 30})
        == "{'result': mpf('0.301029995663981195213738894724506')}"
    )  # as BFCL prints it, at the precision asked
    assert math.call("square_root", {"number": 2, "precision": 10**6}).startswith("Error during execution: not run")
    assert (decimal.getcontext().prec, mpmath.mp.dps) == before
    assert math.call("no_such_method", {}) == "Error during execution: name 'no_such_method' is not defined"
    assert math.call("exit", {}) == "Error during execution: Function call exit is not allowed."
