"""A newcomer's first hour, through the installed `toollens` in real processes: an agent in a
file anywhere or a module beside them loads without PYTHONPATH, `--db` takes a file's path as
well as a URL, and a bad setting or an unopenable database is one readable line naming it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TOOLLENS = str(Path(sys.executable).with_name("toollens"))
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOOLLENS_DATABASE_URL")} | {"COLUMNS": "300"}

AGENT = """\
from helper import answer  # a sibling module: the file's folder is importable


def agent(question, toolbox):
    return answer(question)
"""


def toollens(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOOLLENS, *args], capture_output=True, text=True, cwd=cwd, env=ENV, timeout=120)


def stored_runs(db: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return [name for (name,) in conn.execute("select name from runs order by id")]


def test_an_agent_file_anywhere_loads_by_its_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "outside" / "agents"
    elsewhere.mkdir(parents=True)
    (elsewhere / "bad_agent.py").write_text(AGENT)
    (elsewhere / "helper.py").write_text("def answer(question):\n    return 'No sé.'\n")
    work = tmp_path / "work"
    work.mkdir()
    db = work / "runs.db"
    suite = str(EXAMPLES / "suite_v2.yaml")
    relative = toollens(
        "run", suite, "--agent", "../outside/agents/bad_agent.py:agent", "--run", "rel", "--db", str(db), cwd=work
    )
    assert relative.returncode == 0, relative.stderr
    absolute = toollens(
        "run", suite, "--agent", f"{elsewhere / 'bad_agent.py'}:agent", "--run", "abs", "--db", "runs.db", cwd=work
    )  # --db: a path relative to where the command runs
    assert absolute.returncode == 0, absolute.stderr
    assert stored_runs(db) == ["rel", "abs"]
    assert "stored 18 of 18 case runs, 18 failed, 0 agent errors" in relative.stderr


def test_a_module_in_the_working_directory_loads_without_pythonpath(tmp_path: Path) -> None:
    (tmp_path / "bad_agent.py").write_text(AGENT)
    (tmp_path / "helper.py").write_text("def answer(question):\n    return 'No sé.'\n")
    done = toollens("run", str(EXAMPLES / "suite_v2.yaml"), "--agent", "bad_agent:agent", "--db", "r.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(stored_runs(tmp_path / "r.db")) == 1


def test_an_agent_that_cannot_be_found_says_where_it_looked(tmp_path: Path) -> None:
    suite = str(EXAMPLES / "suite_v2.yaml")
    module = toollens("run", suite, "--agent", "my_agnet:agent", "--db", "r.db", cwd=tmp_path)
    assert module.returncode == 2 and module.stderr.strip() == (
        f"error: --agent 'my_agnet:agent': cannot import 'my_agnet': no module 'my_agnet' in {tmp_path} or on "
        "PYTHONPATH (give a file as path/to/file.py:function)"
    )
    path = toollens("run", suite, "--agent", "agents/mine.py:agent", "--db", "r.db", cwd=tmp_path)
    assert path.returncode == 2 and path.stderr.strip() == (
        f"error: --agent 'agents/mine.py:agent': no file 'agents/mine.py' (from {tmp_path})"
    )
    assert not (tmp_path / "r.db").exists()


def test_serve_takes_a_files_path(tmp_path: Path) -> None:
    made = toollens("demo", "--no-serve", "--db", "demo.db", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "Ctrl-C" not in made.stderr
    assert "`toollens serve --db demo.db` shows them" in " ".join(made.stderr.split())
    port = free_port()
    server = subprocess.Popen(
        [TOOLLENS, "serve", "--db", "demo.db", "--port", str(port)],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs") as answer:
                    runs = json.load(answer)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(30)
    assert runs["count"] == 6  # the demo's six runs (app/commands/demo.py DEMO_RUNS)


def test_a_bad_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    bad_url = toollens("serve", "--db", "mysql://db/toollens", cwd=tmp_path)
    assert bad_url.returncode == 2 and bad_url.stderr.splitlines() == [
        "error: --db (or TOOLLENS_DATABASE_URL): must be a SQLite file's path, or a sqlite:/// or "
        "postgresql+psycopg:// URL, not 'mysql://db/toollens'"
    ]
    env = subprocess.run(
        [TOOLLENS, "export", "1", "--out", "-"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=ENV | {"TOOLLENS_MAX_BODY_BYTES": "64MB"},
        timeout=60,
    )
    assert env.returncode == 2 and env.stderr.splitlines() == [
        "error: TOOLLENS_MAX_BODY_BYTES: Input should be a valid integer, unable to parse string as an integer "
        "(got '64MB')"
    ]


def test_an_unopenable_database_names_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder" / "x.db"
    for args in (["serve"], ["run", str(EXAMPLES / "suite_v2.yaml")], ["db", "upgrade"]):
        done = toollens(*args, "--db", str(missing), cwd=tmp_path)
        assert done.returncode == 2, args
        assert done.stderr.splitlines()[-1].endswith(f"the database {missing}: unable to open database file"), (
            args,
            done.stderr,
        )
    done = toollens("export", "1", "--out", "-", "--db", str(missing), cwd=tmp_path)  # it only reads
    assert done.returncode == 2 and done.stderr.strip() == (
        f"error: no database at {missing} (`toollens demo` records the example runs there; `toollens import` or "
        "`toollens run` stores yours); a command that only reads creates none"
    )


def test_the_demo_records_where_every_command_reads(tmp_path: Path) -> None:
    """The demo without --db writes ./toollens.db, which show reads without --db; a second demo
    records its own runs again and leaves the user's alone; a command that only reads never makes a
    database: a mistyped --db is an error naming the nearest one."""
    mine = toollens("run", str(EXAMPLES / "suite_v2.yaml"), "--run", "mine", "--db", "toollens.db", cwd=tmp_path)
    assert mine.returncode == 0, mine.stderr
    for _ in range(2):
        made = toollens("demo", "--no-serve", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    said = " ".join(made.stderr.split())
    assert (
        f"Example runs stored in {tmp_path / 'toollens.db'}, the database every command reads without --db. "
        "`toollens serve` shows them; `toollens show banca-v1-simulado-x5` prints one here."
    ) in said
    assert stored_runs(tmp_path / "toollens.db") == [
        "mine",
        "banca-v1-simulado",
        "banca-v2-simulado",
        "banca-v1-simulado-x5",
        "banca-v2-simulado-x5",
        "banca-v2-conversaciones",
        "banca-v2-perfiles",
    ]
    shown = toollens("show", "banca-v1-simulado-x5", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert re.match(r"run \d+ \(banca-v1-simulado-x5\) · simulated", shown.stdout)
    reads = (
        ["show", "banca-v1-simulado-x5"],
        ["export", "mine", "--out", "-"],
        ["gate", "--baseline", "mine", "--candidate", "mine"],
    )
    for args in reads:
        typo = toollens(*args, "--db", "toollens.dbb", cwd=tmp_path)
        assert typo.returncode == 2, args
        assert typo.stderr.strip() == (
            f"error: no database at {tmp_path / 'toollens.dbb'} (did you mean "
            "toollens.db?); a command that only reads creates none"
        ), args
    assert not list(tmp_path.glob("toollens.dbb*"))  # nothing made
    elsewhere = toollens("demo", "--no-serve", "--db", "other.db", cwd=tmp_path)
    assert (
        "`toollens serve --db other.db` shows them; `toollens show banca-v1-simulado-x5 --db other.db` prints"
        in " ".join(elsewhere.stderr.split())
    )


def test_run_says_where_results_went_and_show_prints_them(tmp_path: Path) -> None:
    ran = toollens(
        "run", str(EXAMPLES / "suite_v2.yaml"), "--run", "first", "--trials", "2", "--db", "r.db", cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    said = " ".join(ran.stderr.split())
    assert (
        f"stored in {tmp_path / 'r.db'}: `toollens show first --db r.db` prints its figures; "
        "`toollens serve --db r.db` shows it at /runs/1"
    ) in said
    shown = toollens("show", "first", "--db", "r.db", "--top", "3", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    as_json = toollens("show", "1", "--db", "r.db", "--json", cwd=tmp_path)
    data = json.loads(as_json.stdout)
    exported = toollens("export", "first", "--out", "first.jsonl", "--db", "r.db", cwd=tmp_path)
    assert exported.returncode == 0
    scored = json.loads(
        toollens("score", str(EXAMPLES / "suite_v2.yaml"), "first.jsonl", "--json", cwd=tmp_path).stdout
    )
    # the stored run reads as its exported records score
    for key in (
        "selection_precision",
        "selection_recall",
        "schema_validity",
        "argument_accuracy",
        "hallucinated_tools",
        "recovery",
        "hallucination_after_error",
        "pass_hat_k",
        "outcomes",
    ):
        assert data[key] == scored[key], key
    assert data["run"]["name"] == "first" and data["trajectories"] == 36
    assert data["causes"] == scored["causes"] and scored["causes"]
    assert "What went wrong (failed trajectories by first divergence)" in shown.stdout
    assert scored["causes"][0]["text"] in shown.stdout
    lines = shown.stdout.splitlines()
    assert lines[0] == "run 1 (first) · simulated · simulated (seed 0) · finished"
    failing = sum(1 for c in scored["cases"] if not c["passed"])
    assert f"Failing cases ({failing} of 36)" in shown.stdout and f"… and {failing - 3} more" in shown.stdout
    pass_k = "  ".join(f"k={k}: {v:.4f}" for k, v in scored["pass_hat_k"].items())
    assert f"pass^k: {pass_k}" in lines
    p = scored["selection_precision"]
    assert any("precision" in line and f"{p['num']} / {p['den']}" in line for line in lines)
    assert lines[-1] == "On the dashboard: `toollens serve --db r.db`, then /runs/1"
    missing = toollens("show", "nope", "--db", "r.db", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip() == "error: no run 'nope'"


def test_a_piped_report_does_not_wrap_at_80_columns(tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "COLUMNS"}
    done = subprocess.run(
        [TOOLLENS, "score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "trajectories_v1.jsonl")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if "hallucination after error" in line]
    assert len(rows) == 1 and "BLOCKING: must be 0" in rows[0] and len(rows[0]) > 80


def test_the_curation_commands_of_the_api_doc_work_as_written(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    first = doc.index("toollens curate v1 ")
    lines = [line.split("#")[0].split() for line in doc[first : doc.index("```", first)].strip().splitlines()]
    assert [words[:2] for words in lines] == [["toollens", "curate"], ["toollens", "score"]]
    made = toollens(
        "import",
        str(EXAMPLES / "trajectories_v1.jsonl"),
        "--suite",
        str(EXAMPLES / "suite_v1.yaml"),
        "--run",
        "v1",
        "--model",
        "sim",
        cwd=tmp_path,
    )  # the doc's first block makes run v1 so
    assert made.returncode == 0, made.stderr
    curated = toollens(*lines[0][1:], cwd=tmp_path)
    assert curated.returncode == 0, curated.stderr
    scored = toollens(*lines[1][1:], "--json", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    report = json.loads(scored.stdout)
    # every source is scored under its new case id (none is a case the suite lacks), and most pass:
    # what fails is what no case decides (formats.md#curated-cases)
    assert report["trajectories"] == 12 and [c["case_id"] for c in report["cases"]] == [
        json.loads(line)["case_id"] for line in (tmp_path / "curated.jsonl").read_text().splitlines()
    ]
    assert sum(c["passed"] for c in report["cases"]) >= 8


TOOLSET = "name: s\ntoolset:\n  tools:\n    - name: a\n      description: x\ncases:\n"


def test_one_line_number_per_parse_error_the_mistakes(tmp_path: Path) -> None:
    mistakes = {  # file text -> the line the error must name (the mistake's, not where the parser gave up)
        TOOLSET + "  - id: c1\n    question: q\n    expected_calls: [a\n  - id: c2\n    question: r\n": 9,
        TOOLSET + '  - id: c1\n    question: "q\n  - id: c2\n    question: r\n  - id: c3\n    question: t\n': 8,
        TOOLSET + "  - id: c1\n    question: q\n   expected_calls: [a]\n": 9,
        TOOLSET + "  - id: c1\n  question: q\n": 8,
    }
    (tmp_path / "t.jsonl").write_text('{"case_id": "c1", "calls": [], "answer": ""}\n')
    for i, (text, line) in enumerate(mistakes.items()):
        (tmp_path / f"s{i}.yaml").write_text(text)
        done = toollens("score", f"s{i}.yaml", "t.jsonl", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.startswith(f"error: s{i}.yaml:{line}: cannot parse: "), done.stderr
        assert " line " not in done.stderr and "column" not in done.stderr  # one number, the file's line
    (tmp_path / "s.json").write_text('{"name": "s",\n "cases": [}\n')
    done = toollens("score", "s.json", "t.jsonl", cwd=tmp_path)
    assert done.stderr == "error: s.json:2: cannot parse: Expecting value at column 12\n"


def test_a_json_array_given_as_json_lines_is_named_so(tmp_path: Path) -> None:
    records = [{"case_id": "saldo-001", "calls": [], "answer": ""}, {"case_id": "saldo-002", "calls": [], "answer": ""}]
    (tmp_path / "t.jsonl").write_text(json.dumps(records, indent=2))
    done = toollens("score", str(EXAMPLES / "suite_v2.yaml"), "t.jsonl", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: t.jsonl:1: a JSON array, not JSON Lines: give one record per line (e.g. jq -c '.[]' FILE)\n"
    )
    (tmp_path / "u.jsonl").write_text('{"case_id": "saldo-001", "calls": [], "answer": ""}\n{"case_id": "x" "calls"}\n')
    done = toollens("score", str(EXAMPLES / "suite_v2.yaml"), "u.jsonl", cwd=tmp_path)
    assert done.stderr == "error: u.jsonl:2: not valid JSON: Expecting ',' delimiter at column 17\n"
    (tmp_path / "v.jsonl").write_text('{"case_id": "saldo-001", "answer": "no cierra}')  # a last line cut short
    done = toollens("score", str(EXAMPLES / "suite_v2.yaml"), "v.jsonl", cwd=tmp_path)
    assert done.stderr == "error: v.jsonl:1: not valid JSON: Unterminated string starting at column 36\n"


def test_show_counts_calls_from_one_and_states_f5_over_the_order_checks(tmp_path: Path) -> None:
    """saldo-001 trial 2 of the v1 examples: a 503 injected at step 1 (0-based), its second call
    (ver_saldo): "http_503 at call #2", as the trajectory page says. F5: the pair verificar_compra ->
    emitir_nota_credito broken twice, in 26 order checks (7.7%), as the runs list counts it."""
    made = toollens(
        "import",
        str(EXAMPLES / "trajectories_v1.jsonl"),
        "--suite",
        str(EXAMPLES / "suite_v1.yaml"),
        "--run",
        "v1",
        "--db",
        "s.db",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    shown = toollens("show", "v1", "--db", "s.db", "--top", "40", cwd=tmp_path)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in shown.stdout.splitlines() if "│" in line]
    assert ["saldo-001", "2", "http_503 at call #2", "step_not_done, recovery_hallucinated"] in rows
    assert ["F5 order", "dependency violations of the order checks", "2 / 26", "7.7%", ""] in rows
    assert not any("@ call" in line for line in shown.stdout.splitlines())
    assert "passed 13/36 (36.1%)" in shown.stdout.splitlines()  # as the runs list's cell reads it: 36.1% 13/36
    scored = toollens("score", str(EXAMPLES / "suite_v1.yaml"), str(EXAMPLES / "trajectories_v1.jsonl"), cwd=tmp_path)
    assert "passed 13/36 (36.1%)" in scored.stdout.splitlines()


def test_fix_says_how_many_proposals_it_left_out_and_counts_in_words(tmp_path: Path) -> None:
    """The demo's five-trial v1 run calls for 30 proposals; a plain `fix` prints 20 and says the rest."""
    made = toollens("demo", "--no-serve", "--db", "d.db", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    done = toollens("fix", "banca-v1-simulado-x5", "--db", "d.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run banca-v1-simulado-x5: 30 proposals from 53 failed trajectories")
    assert sum(line.startswith("#") for line in lines) == 20
    assert lines[-1] == "10 more proposals: --top 30 prints all 30 (--json lists them too)"
    assert "explains 1 failed trajectory (" in done.stdout and not re.search(r"\b1 failed trajectories", done.stdout)
    every = toollens("fix", "banca-v1-simulado-x5", "--db", "d.db", "--top", "30", cwd=tmp_path)
    assert "more proposal" not in every.stdout and sum(line.startswith("#") for line in every.stdout.splitlines()) == 30


CRASHY = """\
def lookup(table, key):
    return table[key]


def agent(question, toolbox):
    if "saldo" in question.lower():
        return lookup({}, "saldo")
    return "No sé."
"""


def test_the_agents_own_exception_is_kept_and_shown(tmp_path: Path) -> None:
    """An agent that raises KeyError('saldo') on the three questions of suite_v2 that say "saldo": the run
    counts them by type, show names the exception on each failing case, export keeps type, message and the
    agent's own frames (not the runner's)."""
    (tmp_path / "crashy.py").write_text(CRASHY)
    ran = toollens(
        "run",
        str(EXAMPLES / "suite_v2.yaml"),
        "--agent",
        "crashy.py:agent",
        "--run",
        "crashy",
        "--db",
        "r.db",
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "18 failed, 3 agent errors (KeyError 3), 0 infrastructure errors" in ran.stderr
    shown = toollens("show", "crashy", "--db", "r.db", cwd=tmp_path)
    assert "3 trajectories ended with the agent raising: KeyError 3" in " ".join(shown.stdout.split())
    assert sum("raised KeyError: 'saldo'" in line for line in shown.stdout.splitlines()) == 3
    toollens("export", "crashy", "--out", "x.jsonl", "--db", "r.db", cwd=tmp_path)
    errors = [
        r["agent_error"] for r in map(json.loads, (tmp_path / "x.jsonl").read_text().splitlines()) if "agent_error" in r
    ]
    assert len(errors) == 3
    assert errors[0] == {
        "type": "KeyError",
        "message": "'saldo'",
        "traceback": [
            f'{tmp_path / "crashy.py"}:7 in agent: return lookup({{}}, "saldo")',
            f"{tmp_path / 'crashy.py'}:2 in lookup: return table[key]",
        ],
    }
