"""Curation: a trajectory becomes a suite case that scores it as passing
(minus what a person edited), from the core, the API, the page's form and
``toollens curate``. Every figure here was counted by hand."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.core.advise.curate import CallEdit, Edits, add_cases, case_document, draft
from app.core.errors import SuiteError
from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite, parse_suite
from app.importers import Options, convert
from tests.factories import BANKING_TOOLS, FAIL_SALDO, OK_CLIENTE, OK_SALDO, call, examples_client, record
from tests.resources import DATA, shared_data

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EMPTY: dict[str, Any] = {"name": "banca", "toolset": BANKING_TOOLS, "cases": []}
TOOLSET = parse_suite(EMPTY).toolset
runner = CliRunner()


def scored(case: dict[str, Any], traj: Any) -> Any:
    """The trajectory scored against a suite holding only ``case``."""
    suite = parse_suite(add_cases(EMPTY, [case]))
    traj.case_id = case["id"]
    return Scorer(suite).score(traj)


# -- the core ---------------------------------------------------------------------


def test_a_retry_after_a_fault_is_one_step_and_the_case_passes_its_source() -> None:
    traj = record(
        calls=[OK_CLIENTE, FAIL_SALDO, OK_SALDO], answer="Tu saldo es $142.900", fault={"step": 1, "kind": "http_503"}
    )
    d = draft(traj, TOOLSET)
    assert [(s.index, s.name, s.calls) for s in d.steps] == [(0, "buscar_cliente", (0,)), (2, "ver_saldo", (1, 2))]
    case = case_document(traj, TOOLSET, Edits(case_id="cur", expected_datum=["142900"]))
    assert case["expected_calls"] == [
        {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
        {"name": "ver_saldo", "arguments": {"id": 8812}},
    ]
    # the injected 503 is the fault plan's: the mock answers what the retry read
    assert case["mocks"] == {
        "buscar_cliente": {
            "responses": [{"when": {"rut": "12345678-9"}, "response": '{"id": 8812, "nombre": "Ana Rojas"}'}]
        },
        "ver_saldo": {"responses": [{"when": {"id": 8812}, "response": '{"saldo": 142900}'}]},
    }
    assert case["tags"] == ["curated"] and case["expected_datum"] == "142900"
    ts = scored(case, traj)
    assert ts.failures == [] and ts.passed
    assert ts.outcome is not None and ts.outcome.outcome == "recovered"


def test_a_corrected_retry_accepts_both_values_and_the_mocks_replay_both_observations() -> None:
    wrong = call(
        "ver_saldo",
        {"id": 12345678},
        "ERROR 404: no existe el cliente",
        {"kind": "not_found", "message": "ERROR 404: no existe el cliente", "injected": False},
    )
    traj = record(calls=[OK_CLIENTE, wrong, OK_SALDO], answer="Tu saldo es $142.900")
    case = case_document(traj, TOOLSET, Edits(case_id="cur"))
    assert case["expected_calls"][1] == {
        "name": "ver_saldo",
        "arguments": {"id": 8812},
        "tolerance": {"id": {"one_of": [12345678, 8812]}},
    }
    suite = parse_suite(add_cases(EMPTY, [case]))
    mock = suite.by_id["cur"].mocks["ver_saldo"]
    assert mock.respond({"id": 12345678}, {}) == "ERROR 404: no existe el cliente"
    assert mock.respond({"id": 8812}, {}) == '{"saldo": 142900}'
    assert scored(case, traj).failures == []


def test_edits_change_the_score_exactly() -> None:
    traj = record(calls=[OK_CLIENTE, OK_SALDO], answer="Tu saldo es $142.900")
    # dropped: the call to buscar_cliente is an extra call, 1 of 2 selections right
    dropped = scored(case_document(traj, TOOLSET, Edits(case_id="d", calls={0: CallEdit(keep=False)})), traj)
    assert dropped.failures == ["selection"]
    assert (dropped.selection_num, dropped.selection_den, dropped.recall_num, dropped.recall_den) == (1, 2, 1, 1)
    # another id in the same calls: exact fails on id, ignore accepts it
    other = record(calls=[OK_CLIENTE, call("ver_saldo", {"id": 9999}, '{"saldo": 0}')], answer="Tu saldo es $0")
    exact = scored(case_document(traj, TOOLSET, Edits(case_id="e")), other)
    assert exact.failures == ["arguments"] and (exact.args_num, exact.args_den) == (1, 2)
    assert [(m.field, m.expected, m.got) for m in exact.calls[1].mismatches or []] == [("id", 8812, 9999)]
    ignored = case_document(traj, TOOLSET, Edits(case_id="i", calls={1: CallEdit(tolerance={"id": "ignore"})}))
    assert ignored["expected_calls"][1]["tolerance"] == {"id": "ignore"}
    assert scored(ignored, other).failures == []
    within_two = CallEdit(tolerance={"id": {"number": {"abs": 2}}})
    near = case_document(traj, TOOLSET, Edits(case_id="n", calls={1: within_two}))
    off_by_one = record(calls=[OK_CLIENTE, call("ver_saldo", {"id": 8813}, "{}")])
    assert scored(near, off_by_one).failures == [] and scored(near, other).failures == ["arguments"]
    # an expected final state the mocks' replay does not reach
    state = scored(case_document(traj, TOOLSET, Edits(case_id="s", expected_state={"notas_credito": []})), traj)
    assert state.failures == ["state"]


def test_a_conversation_becomes_turns_split_where_each_user_message_came() -> None:
    other = call("buscar_cliente", {"rut": "9876543-K"}, '{"id": 5531}')
    traj = record(
        calls=[OK_CLIENTE, OK_SALDO, other],
        answer="Pedro es el cliente 5531",
        messages=[
            {"role": "user", "content": "¿Cuál es el saldo del cliente 12345678-9?", "calls_before": 0},
            {"role": "assistant", "content": "Su saldo es $142.900", "calls_before": 2},
            {"role": "user", "content": "¿Y quién es 9876543-K?", "calls_before": 2},
            {"role": "assistant", "content": "Pedro es el cliente 5531", "calls_before": 3},
        ],
    )
    case = case_document(traj, TOOLSET, Edits(case_id="conv"))
    assert "question" not in case and "expected_calls" not in case
    assert [(t["user"], [c["name"] for c in t["expected_calls"]]) for t in case["turns"]] == [
        ("¿Cuál es el saldo del cliente 12345678-9?", ["buscar_cliente", "ver_saldo"]),
        ("¿Y quién es 9876543-K?", ["buscar_cliente"]),
    ]
    assert scored(case, traj).failures == []


def test_a_case_the_schemas_reject_names_the_field() -> None:
    traj = record(calls=[OK_CLIENTE, OK_SALDO, call("cancelar_pedido", {"numero": "PED-1"})])
    assert [(x.index, x.reason) for x in draft(traj, TOOLSET).left_out] == [(2, "not in the toolset")]

    def refused(edits: dict[int, CallEdit], case_id: str = "x") -> str:
        with pytest.raises(SuiteError) as caught:
            add_cases(
                {**EMPTY, "cases": [{"id": "taken", "question": "?"}]},
                [case_document(traj, TOOLSET, Edits(case_id=case_id, calls=edits))],
            )
        return caught.value.field

    assert refused({0: CallEdit(arguments={"rut": 5})}) == "calls[0].arguments.rut"
    assert refused({1: CallEdit(arguments={"cuenta": 1})}) == "calls[1].arguments.cuenta"  # no extra fields
    assert refused({1: CallEdit(tolerance={"monto": "ignore"})}) == "calls[1].tolerance.monto"
    assert refused({1: CallEdit(tolerance={"id": "roughly"})}) == "calls[1].tolerance.id"
    assert refused({2: CallEdit(keep=True)}) == "calls[2]"
    assert refused({}, case_id="taken") == "case_id"
    bad_only = record(calls=[call("ver_saldo", {"id": "8812"}, "")])  # no attempt passes the schema
    assert case_document(bad_only, TOOLSET, Edits(case_id="b"))["expected_calls"] == [{"name": "ver_saldo"}]
    with pytest.raises(SuiteError) as caught:
        case_document(bad_only, TOOLSET, Edits(case_id="b", calls={0: CallEdit(tolerance={"id": "ignore"})}))
    assert caught.value.field == "calls[0].tolerance"
    fixed = case_document(bad_only, TOOLSET, Edits(case_id="b", calls={0: CallEdit(arguments={"id": 8812})}))
    assert fixed["expected_calls"] == [{"name": "ver_saldo", "arguments": {"id": 8812}}]
    # another suite whose toolset has no ver_saldo
    small = parse_suite({"name": "s", "toolset": BANKING_TOOLS[:1], "cases": []}).toolset
    with pytest.raises(SuiteError) as caught:
        case_document(traj, small, Edits(case_id="x"), source=TOOLSET)
    assert caught.value.field == "calls[1].name"
    kept = case_document(traj, small, Edits(case_id="x", calls={1: CallEdit(keep=False)}), source=TOOLSET)
    assert [c["name"] for c in kept["expected_calls"]] == ["buscar_cliente"]


@shared_data(TAU, SCHEMAS)
def test_every_tau_bench_trajectory_curated_scores_as_passing() -> None:
    conversion = convert("tau-bench", TAU, Options(tools=SCHEMAS))
    trajs = [t for _, t in conversion.records()]
    base = {**conversion.suite, "cases": []}
    toolset = parse_suite(base).toolset
    drafts = [draft(t, toolset) for t in trajs]
    assert sum(len(t.calls) for t in trajs) == 621
    assert sum(len(d.steps) for d in drafts) == 543  # 58 thinks left out, 20 retries joined (within a turn)
    assert Counter(x.reason for d in drafts for x in d.left_out) == {"only thinks: not aligned": 58}
    assert sum(1 for d in drafts for s in d.steps if s.tolerance) == 12  # a corrected retry: one_of
    assert sum(len(d.turns) > 1 for d in drafts) == 100 and sum(len(d.turns) for d in drafts) == 860
    suite = parse_suite(
        add_cases(base, [case_document(t, toolset, Edits(case_id=f"c{i}")) for i, t in enumerate(trajs)])
    )
    scorer = Scorer(suite)
    replayed = Counter()
    failures = Counter()
    for i, t in enumerate(trajs):
        t.case_id, t.reward = f"c{i}", None  # judged by the case, not by tau-bench's reward
        failures[tuple(scorer.score(t).failures)] += 1
        mocks = suite.by_id[t.case_id].mocks
        for c in t.calls:
            text = c.observation if c.observation is not None else c.error.message if c.error else ""
            replayed[mocks[c.name].respond(dict(c.arguments), {}) == text] += 1
    # one call repeated the arguments of an earlier one and read something else: the mock answers the first
    assert replayed == {True: 620, False: 1}
    # every trajectory meets its own case, but a step is done only by a call that succeeded: 25 of the
    # 29 with a tool error left a call that failed (and became an expected step) never made good; six of
    # them stopped honestly (five hand-offs, and task 15 trial 3: "there are not enough seats … on the
    # return flight (HAT290) … I cannot proceed", two messages before its last)
    assert failures == {(): 75, ("step_not_done", "recovery_confused"): 19, ("step_not_done",): 6}


# -- the store and the API ---------------------------------------------------------


def _saldo(client: Any) -> tuple[int, int]:
    run = client.get("/api/runs").json()["data"][0]
    t = client.get(f"/api/runs/{run['id']}/trajectories", params={"case_id": "saldo-001"}).json()["data"][0]
    return run["suite_id"], t["id"]


def test_adding_a_case_makes_a_new_suite_version_that_runs_record(db_url: str) -> None:
    with examples_client(db_url, "v1") as c:
        suite_id, tid = _saldo(c)
        before = c.get("/api/suites").json()
        assert [(s["version"], s["cases"], s["runs"]) for s in before] == [(1, 18, 1)]
        r = c.post(
            f"/api/suites/{suite_id}/cases",
            json={"trajectory_id": tid, "case_id": "saldo-curado", "expected_datum": "142900"},
        )
        assert r.status_code == 201, r.text
        added = r.json()["suite"]
        assert (added["version"], added["parent_id"], added["cases"]) == (2, suite_id, 19)
        assert added["hash"] != before[0]["hash"] and len(added["hash"]) == 16
        assert r.json()["case"]["source"] == {"run": "v1", "trajectory": tid, "case_id": "saldo-001", "trial": 0}
        # a run on the new version records it, and the source trajectory passes there
        run = c.post("/api/runs", json={"name": "curated", "suite_id": added["id"]}).json()
        assert (run["suite_id"], run["suite_hash"], run["suite_version"]) == (added["id"], added["hash"], 2)
        rec = c.get(f"/api/trajectories/{tid}").json()
        body = {
            "case_id": "saldo-curado",
            "question": rec["question"],
            "answer": rec["answer"],
            "calls": [
                {"name": x["name"], "arguments": x["arguments"], "observation": x["observation"], "error": x["error"]}
                for x in rec["calls"]
            ],
        }
        assert c.post(f"/api/runs/{run['id']}/trajectories", json={"trajectories": [body]}).status_code == 200
        [stored] = c.get(f"/api/runs/{run['id']}/trajectories").json()["data"]
        assert stored["passed"] and stored["failures"] == []
        assert f"version 2 · <code>{added['hash']}</code>" in c.get(f"/runs/{run['id']}").text
        # the same content again is the same version; a new suite starts at version 1
        again = c.post(
            f"/api/suites/{added['id']}/cases", json={"trajectory_id": tid, "case_id": "x2", "new_suite": "regresiones"}
        )
        assert again.status_code == 201
        assert {k: again.json()["suite"][k] for k in ("name", "version", "parent_id", "cases")} == {
            "name": "regresiones",
            "version": 1,
            "parent_id": None,
            "cases": 1,
        }
        doc = c.get(f"/api/suites/{again.json()['suite']['id']}").json()["document"]
        assert [x["id"] for x in doc["cases"]] == ["x2"] and doc["toolset"]["name"] == "atencion_cliente"


def test_the_migration_numbers_the_versions_stored_before_it(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from app.store.db import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0005")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO toolset_versions (id, toolset, hash, label, tools, created_at) "
                "VALUES (1, 't', 'h', '', '[]', '2026-01-01')"
            )
        )
        for sid, name in [(1, "a"), (2, "b"), (3, "a"), (4, "a")]:
            conn.execute(
                sa.text(
                    "INSERT INTO suites (id, name, hash, document, toolset_version_id, created_at) "
                    "VALUES (:id, :name, :hash, '{}', 1, '2026-01-01')"
                ),
                {"id": sid, "name": name, "hash": f"h{sid}"},
            )
    upgrade(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, version, parent_id FROM suites ORDER BY id")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(1, 1, None), (2, 1, None), (3, 2, None), (4, 3, None)]


def test_a_case_the_schema_rejects_is_422_naming_the_field_and_stores_nothing(db_url: str) -> None:
    with examples_client(db_url, "v1") as c:
        suite_id, tid = _saldo(c)
        before = c.get("/api/suites").json()
        cases = [
            ({"calls": [{"index": 0, "arguments": {"rut": 12345678}}]}, "calls[0].arguments.rut"),
            ({"calls": [{"index": 1, "tolerance": {"saldo": "ignore"}}]}, "calls[1].tolerance.saldo"),
            ({"case_id": "saldo-001"}, "case_id"),
            ({"new_suite": "atencion-cliente-v1"}, "new_suite"),
        ]
        for extra, where in cases:
            r = c.post(f"/api/suites/{suite_id}/cases", json={"trajectory_id": tid, "case_id": "c1", **extra})
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["field"] == where
        assert c.post(f"/api/suites/{suite_id}/cases", json={"trajectory_id": 10**6, "case_id": "c"}).status_code == 404
        assert c.get("/api/suites").json() == before


def test_the_page_form_adds_a_case_or_names_the_field(db_url: str) -> None:
    with examples_client(db_url, "v1") as c:
        suite_id, tid = _saldo(c)
        page = c.get(f"/trajectories/{tid}").text
        assert 'name="keep.0"' in page and 'name="rule.1.id"' in page and 'value="saldo-001-' in page
        same = {"Sec-Fetch-Site": "same-origin"}
        form = {
            "suite": str(suite_id),
            "case_id": "desde-pagina",
            "keep.1": "on",
            "rule.1.id": "number",
            "abs.1.id": "-1",
        }
        r = c.post(f"/trajectories/{tid}/curate", data=form, headers=same)
        assert (
            r.status_code == 422
            and "calls[1].tolerance.id" in r.text
            and "aria-invalid" not in r.text.split('name="case_id"')[1].split(">")[0]
        )
        assert len(c.get("/api/suites").json()) == 1
        r = c.post(f"/trajectories/{tid}/curate", data={**form, "abs.1.id": "2"}, headers=same, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith(f"/trajectories/{tid}?added=")
        assert "Added case <code>desde-pagina</code>" in c.get(r.headers["location"]).text
        doc = c.get(f"/api/suites/{r.headers['location'].split('added=')[1].split('&')[0]}").json()["document"]
        case = doc["cases"][-1]  # keep.0 not sent: buscar_cliente dropped
        assert case["expected_calls"] == [
            {"name": "ver_saldo", "arguments": {"id": 8812}, "tolerance": {"id": {"number": {"abs": 2.0}}}}
        ]
        assert (
            c.post(f"/trajectories/{tid}/curate", data=form, headers={"Sec-Fetch-Site": "cross-site"}).status_code
            == 403
        )


def test_with_a_token_set_both_ways_in_need_it(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.core.suites.suite import load_suite_document
    from app.settings import Settings
    from app.store.db import upgrade
    from app.web.app import create_app

    url = f"sqlite:///{tmp_path / 't.db'}"
    upgrade(url)
    auth = {"Authorization": "Bearer s3cret-token"}
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False, api_token="s3cret-token"))) as c:
        run = c.post(
            "/api/runs", json={"name": "v1", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")}, headers=auth
        ).json()
        rec = json.loads((EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()[0])
        assert c.post(f"/api/runs/{run['id']}/trajectories", json={"trajectories": [rec]}, headers=auth).is_success
        body = {"trajectory_id": 1, "case_id": "c"}
        assert c.post(f"/api/suites/{run['suite_id']}/cases", json=body).status_code == 401
        form = {"suite": str(run["suite_id"]), "case_id": "c", "keep.0": "on"}
        same = {"Sec-Fetch-Site": "same-origin"}
        r = c.post("/trajectories/1/curate", data=form, headers=same)
        assert r.status_code == 422 and "<code>token</code>: the API token is wrong" in r.text
        r = c.post(
            "/trajectories/1/curate", data={**form, "token": "s3cret-token"}, headers=same, follow_redirects=False
        )
        assert r.status_code == 303
        assert [s["cases"] for s in c.get("/api/suites").json()] == [19, 18]


# -- toollens curate -------------------------------------------------------------


def test_curate_writes_a_suite_file_that_score_loads_and_passes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    r = runner.invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "v1",
            "--db",
            db,
        ],
    )
    assert r.exit_code == 0, r.output
    into = tmp_path / "curated.yaml"
    r = runner.invoke(
        cli, ["curate", "v1", "--where", "failure=selection", "--limit", "50", "--into", str(into), "--db", db]
    )
    assert r.exit_code == 0, r.output
    assert "12 cases from run v1" in r.stderr
    doc = yaml.safe_load(into.read_text())
    ids = [c["id"] for c in doc["cases"]]
    assert len(ids) == 12 and all(c["tags"] == ["curated"] for c in doc["cases"])
    # the run's trajectories as records, each under its curated case's id
    records = {
        rec["case_id"] + ":" + str(i): rec
        for i, rec in enumerate(
            json.loads(line) for line in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()
        )
    }
    by_source = {c["source"]["trajectory"]: c["id"] for c in doc["cases"]}
    rows = [dict(rec, case_id=by_source[i + 1]) for i, rec in enumerate(records.values()) if i + 1 in by_source]
    jsonl = tmp_path / "curated.jsonl"
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = runner.invoke(cli, ["score", str(into), str(jsonl), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    failing = {c["case_id"]: c["failures"] for c in report["cases"] if c["failures"]}
    # the reference holds every call: what still fails needs no reference (a toolset-wide pair, an invented
    # tool and the cancellation claimed after it), or is a call that failed and was never made good
    assert failing == {
        "nota-001-16": ["dependency"],
        "consulta-001-23": ["dependency"],
        "devolucion-002-27": ["hallucinated_tool", "recovery_hallucinated"],
        "saldo-002-34": ["step_not_done", "recovery_confused"],
    }
    assert report["selection_precision"] == {"num": 20, "den": 20}
    assert report["argument_accuracy"] == {"num": 20, "den": 20}
    # once more: the cases are in the file already; a family of the figures names its failure
    r = runner.invoke(cli, ["curate", "v1", "--where", "failure=selection_recall", "--into", str(into), "--db", db])
    assert r.exit_code == 0 and "0 cases from run v1 into" in r.stderr and "(12 in the file already)" in r.stderr
    for bad, says in [
        ("colour=red", "no filter 'colour'"),
        ("failure=slow", "no failure 'slow'"),
        ("failure", "give KEY=VALUE"),
    ]:
        r = runner.invoke(cli, ["curate", "v1", "--where", bad, "--into", str(into), "--db", db])
        assert r.exit_code == 2 and says in r.stderr, r.stderr
    r = runner.invoke(
        cli,
        [
            "curate",
            "v1",
            "--where",
            "tool=buscar_cliente",
            "--where",
            "outcome=recovered",
            "--into",
            str(tmp_path / "two.json"),
            "--db",
            db,
        ],
    )
    assert r.exit_code == 0, r.output
    # into a hand-written file: the new cases are appended, every line of it kept as it was
    for name in ("suite_v1.yaml", "toolset_v1.yaml"):
        (tmp_path / name).write_text((EXAMPLES / name).read_text())
    mine = tmp_path / "suite_v1.yaml"
    r = runner.invoke(
        cli, ["curate", "v1", "--where", "case=saldo-001", "--limit", "2", "--into", str(mine), "--db", db]
    )
    assert r.exit_code == 0 and "2 cases from run v1" in r.stderr, r.output
    assert mine.read_text().startswith((EXAMPLES / "suite_v1.yaml").read_text())
    assert [c.id for c in load_suite(mine).cases][-3:] == ["verificar-001", "saldo-001-1", "saldo-001-2"]
    lines = (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()[:2]
    jsonl.write_text(
        "".join(json.dumps(dict(json.loads(x), case_id=f"saldo-001-{i + 1}")) + "\n" for i, x in enumerate(lines))
    )
    r = runner.invoke(cli, ["score", str(mine), str(jsonl), "--json"])
    # trial 1 sent the id as a string first, then corrected it: one step, and a schema failure no reference excuses
    assert [(c["case_id"], c["failures"]) for c in json.loads(r.stdout)["cases"]] == [
        ("saldo-001-1", []),
        ("saldo-001-2", ["schema"]),
    ]
    assert load_suite(mine).by_id["saldo-001-2"].expected_calls == load_suite(mine).by_id["saldo-001-1"].expected_calls
    two = json.loads((tmp_path / "two.json").read_text())
    # the recoveries that look the client up: lines 31 and 36 of the example file retried a 503; lines 2,
    # 18 and 22 corrected a call the schema refused, and line 4 the RUT it was refused for
    assert [(c["id"], c["source"]["case_id"]) for c in two["cases"]] == [
        ("saldo-001-2", "saldo-001"),
        ("saldo-002-4", "saldo-002"),
        ("nota-002-18", "nota-002"),
        ("nota-003-22", "nota-003"),
        ("saldo-001-31", "saldo-001"),
        ("nota-001-36", "nota-001"),
    ]
