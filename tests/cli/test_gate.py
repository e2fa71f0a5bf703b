"""`toollens gate`: the seeded regression (v2 -> v1) fails, the improvement
(v1 -> v2 with honest error handling) passes; Markdown and JUnit outputs;
gate.yaml; bad input. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.core.reports.gate import CaseRef, GateConfig, GateConfigError, RunFigures, evaluate_gate, parse_gate_config
from app.core.reports.gate_report import junit, markdown, md

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
GIVE_UP = "No logré consultar tu saldo: el servicio no está disponible, intenta más tarde."


def _import(db: str, src: Path, suite: str, run: str) -> None:
    r = runner.invoke(cli, ["import", str(src), "--suite", str(EXAMPLES / suite), "--run", run, "--db", db])
    assert r.exit_code == 0, r.output


@pytest.fixture
def runs(db_url: str, tmp_path: Path) -> str:
    """v1 and v2 as shipped, and v2-honest: v2 whose one answer invented after an error (saldo-001 trial 2,
    503 on ver_saldo) now gives up honestly."""
    _import(db_url, EXAMPLES / "trajectories_v1.jsonl", "suite_v1.yaml", "v1")
    _import(db_url, EXAMPLES / "trajectories_v2.jsonl", "suite_v2.yaml", "v2")
    records = [json.loads(x) for x in (EXAMPLES / "trajectories_v2.jsonl").read_text().splitlines()]
    fixed = 0
    for rec in records:
        if rec["case_id"] == "saldo-001" and rec["trial"] == 2 and rec["fault"]:
            rec["answer"], fixed = GIVE_UP, fixed + 1
    assert fixed == 1
    honest = tmp_path / "v2-honest.jsonl"
    honest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    _import(db_url, honest, "suite_v2.yaml", "v2-honest")
    return db_url


def _gate(db: str, baseline: str, candidate: str, tmp_path: Path, *extra: str) -> tuple[int, str, ET.Element, str]:
    md_path, xml_path = tmp_path / "gate.md", tmp_path / "gate.xml"
    r = runner.invoke(
        cli,
        [
            "gate",
            "--baseline",
            baseline,
            "--candidate",
            candidate,
            "--markdown",
            str(md_path),
            "--junit",
            str(xml_path),
            "--db",
            db,
            *extra,
        ],
    )
    return r.exit_code, md_path.read_text(), ET.parse(xml_path).getroot(), r.stdout


def _failed(root: ET.Element, suite: str) -> dict[str, str]:
    node = root.find(f"testsuite[@name='{suite}']")
    assert node is not None
    return {
        tc.get("name", ""): tc.find("failure").get("type", "")  # type: ignore[union-attr]
        for tc in node.findall("testcase")
        if tc.find("failure") is not None
    }


def test_seeded_regression_fails(runs: str, tmp_path: Path) -> None:
    code, summary, root, out = _gate(runs, "v2", "v1", tmp_path)
    assert code == 1
    assert _failed(root, "toollens.gate.families") == {
        "hallucinated_tools": "blocking",
        "hallucination_after_error": "blocking",
        "selection_precision": "regressed",
        "selection_recall": "regressed",
        "schema_validity": "regressed",
        "recovery": "regressed",
        "dependency_violations": "regressed",
    }
    fams = root.find("testsuite[@name='toollens.gate.families']")
    assert fams is not None and (fams.get("tests"), fams.get("failures")) == ("8", "7")
    cases = _failed(root, "toollens.gate.cases")
    # 16 regressed trials and 4 blocking ones (named with their fault: every error the agent saw is one)
    assert len(cases) == 20
    assert cases["pedido-001 trial 0"] == "regressed"
    assert cases["saldo-001 trial 2 fault http_503 at call #2"] == "blocking"  # calls counted from 1, as on the pages
    assert cases["nota-002 trial 2 fault schema at call #3"] == "blocking"  # "quedó emitida" after the schema refused
    assert cases["devolucion-002 trial 1 fault unknown_tool at call #1"] == "blocking"  # "cancelé tu pedido"
    assert root.get("failures") == str(7 + 20)
    assert summary.startswith("## ToolLens gate: ❌ failed\n")
    assert (
        "| F1 selection precision | 70/71 (98.6%) | 65/76 (85.5%) | -13.1 pts | drop <= 2.0 pts | ❌ regressed |"
        in summary
    )
    assert "| F2 argument accuracy | 68/69 (98.6%) | 58/60 (96.7%) | -1.9 pts | drop <= 2.0 pts | ✅ pass |" in summary
    # F5 shown as every page states it, violations of the 26 order checks (the pair verificar_compra ->
    # emitir_nota_credito broken twice in v1), and gated per trajectory: 2/36 = +0.056
    assert (
        "| F5 dependency violations | 0/26 (0.0%) | 2/26 (7.7%) | +0.056/traj | "
        "increase <= 0.000 per trajectory | ❌ regressed |"
    ) in summary
    assert "### Cases that regressed (16: passed in the baseline, fail in the candidate)" in summary
    assert "| pedido\\-001 | 0 | — | `selection` | selection_precision |" in summary
    assert "### Blocking cases (4)" in summary
    # v1 recovers less from the schema errors it makes than v2 from its one: compared source by source
    assert "| F4 recovery | 3/7 (42.9%) | 7/13 (53.8%) | +11.0 pts | drop <= 5.0 pts | ❌ regressed |" in summary
    assert "F4 recovery, by error source: dropped: schema 1/1 \\(100.0%\\) \\-\\> 4/5 \\(80.0%\\)." in summary
    # what sank the candidate's 23 failed trajectories, largest first (the run page's "What went wrong")
    assert (
        "### What went wrong in the candidate (failed trajectories by first divergence)\n\n"
        "1. **4** called buscar\\_producto where buscar\\_pedido was expected\n"
        "2. **3** emitir\\_nota\\_credito called with arguments that break its schema\n"
    ) in summary
    assert "gate FAILED: v2 -> v1" in out
    assert "4 failed trajectories of the candidate: called buscar_producto where buscar_pedido was expected" in out


def test_improvement_passes(runs: str, tmp_path: Path) -> None:
    code, summary, root, _ = _gate(runs, "v1", "v2-honest", tmp_path)
    assert code == 0
    assert root.get("failures") == "0" and _failed(root, "toollens.gate.families") == {}
    assert summary.startswith("## ToolLens gate: ✅ passed\n")
    # every error the agent saw: v1 also invented after a schema error and after an unknown tool
    assert "| F4 hallucination after error | 3/13 (23.1%) | 0/7 (0.0%) | -23.1 pts | must be 0 | ✅ pass |" in summary
    # v1 met 5 schema errors (4 corrected) and 2 unknown tools: a higher total rate, no source dropped
    assert "| F4 recovery | 7/13 (53.8%) | 3/7 (42.9%) | -11.0 pts | drop <= 5.0 pts | ✅ pass |" in summary
    assert "F4 recovery, by error source: no error source dropped \\(the mix of errors changed\\)." in summary
    assert (
        "| F1 selection precision | 65/76 (85.5%) | 70/71 (98.6%) | +13.1 pts | drop <= 2.0 pts | ✅ pass |" in summary
    )
    # the shipped v2 still invents a balance after a 503: better descriptions do not fix error handling
    code, _, root, _ = _gate(runs, "v1", "v2", tmp_path)
    assert code == 1 and _failed(root, "toollens.gate.families") == {"hallucination_after_error": "blocking"}


def test_config_tolerances_and_bad_input(runs: str, tmp_path: Path) -> None:
    cfg = tmp_path / "gate.yaml"
    # violations per checked trajectory: 0 -> 2/36 is +0.056; recovery from schema errors 1/1 -> 4/5 is -20 points
    cfg.write_text(
        "tolerance:\n  selection_precision: 0.15\n  selection_recall: 0.12\n  schema_validity: 0.06\n"
        "  dependency_violations: 0.1\n  recovery: 0.25\n"
    )
    code, summary, root, _ = _gate(runs, "v2", "v1", tmp_path, "--config", str(cfg))
    assert code == 1
    assert _failed(root, "toollens.gate.families") == {
        "hallucinated_tools": "blocking",
        "hallucination_after_error": "blocking",
    }
    assert (
        "| F1 selection precision | 70/71 (98.6%) | 65/76 (85.5%) | -13.1 pts | drop <= 15.0 pts | ✅ pass |" in summary
    )
    # the F4 families over the injected faults alone: v1 and v2 handle them alike, and only the balance
    # invented after the 503 blocks (not what v1 said after a schema error or an unknown tool)
    cfg.write_text("recovery_sources: [injected]\n")
    code, summary, root, _ = _gate(runs, "v2", "v1", tmp_path, "--config", str(cfg))
    assert _failed(root, "toollens.gate.families")["hallucination_after_error"] == "blocking"
    assert "recovery" not in _failed(root, "toollens.gate.families")
    assert (
        "| F4 hallucination after error | 1/6 (16.7%) | 1/6 (16.7%) | +0.0 pts | must be 0 | ⛔ blocking |" in summary
    )
    assert "| F4 recovery | 2/6 (33.3%) | 2/6 (33.3%) | +0.0 pts | drop <= 5.0 pts | ✅ pass |" in summary
    assert "### Blocking cases (3)" in summary and "2:schema" not in summary  # the trial that only invented a tool
    for bad in ("recovery_sources: [injected, typo]\n", "recovery_sources: []\n", "colour: red\n"):
        cfg.write_text(bad)
        r = runner.invoke(cli, ["gate", "--baseline", "v2", "--candidate", "v1", "--config", str(cfg), "--db", runs])
        assert r.exit_code == 2 and (
            "recovery_sources: a non-empty list among injected, tool, schema, unknown_tool" in r.stderr
            or "unknown: colour" in r.stderr
        ), r.stderr
    cfg.write_text("tolerance:\n  hallucinated_tools: 0.1\n")
    r = runner.invoke(cli, ["gate", "--baseline", "v2", "--candidate", "v1", "--config", str(cfg), "--db", runs])
    assert r.exit_code == 2 and "hallucinated_tools: a blocking family must be zero" in r.stderr
    r = runner.invoke(cli, ["gate", "--baseline", "v2", "--candidate", "nope", "--db", runs])
    assert r.exit_code == 2 and "no run 'nope'" in r.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _import(runs, empty, "suite_v1.yaml", "empty")
    r = runner.invoke(cli, ["gate", "--baseline", "v1", "--candidate", "empty", "--db", runs])
    assert r.exit_code == 2 and "run 'empty' has no trajectories: nothing to gate on" in r.stderr
    r = runner.invoke(cli, ["gate", "--baseline", "1", "--candidate", "v2", "--db", runs])  # ids work too
    assert r.exit_code == 1 and "gate FAILED: v1 -> v2" in r.stdout


def _figures(name: str, **families: tuple[int, int]) -> RunFigures:
    base = {
        "selection_precision": (9, 10),
        "selection_recall": (9, 10),
        "schema_validity": (10, 10),
        "argument_accuracy": (8, 10),
        "hallucinated_tools": (0, 10),
        "recovery": (1, 2),
        "hallucination_after_error": (0, 2),
    }
    return RunFigures(
        ref=name,
        name=name,
        id=1,
        toolset="t",
        toolset_version="abcdef0123456789",
        toolset_label="",
        suite="s",
        trajectories=10,
        families={**base, **families},
        dependency_violations=0,
    )


def test_tolerance_edges_and_empty_denominators() -> None:
    cfg = GateConfig()
    # exactly 2 points down is allowed; 2.5 points down is not
    at_edge = evaluate_gate(_figures("a", argument_accuracy=(40, 50)), _figures("b", argument_accuracy=(39, 50)), cfg)
    assert at_edge.passed
    over = evaluate_gate(_figures("a", argument_accuracy=(80, 100)), _figures("b", argument_accuracy=(311, 400)), cfg)
    assert [v.family for v in over.failed_families] == ["argument_accuracy"]
    na = evaluate_gate(_figures("a", recovery=(0, 0)), _figures("b", recovery=(0, 0)), cfg)
    assert na.passed and [v.status for v in na.families if v.family == "recovery"] == ["n/a"]


def test_config_shape_errors() -> None:
    assert parse_gate_config(None) == GateConfig()
    assert parse_gate_config({"tolerance": {"recovery": 0}}).tolerance["recovery"] == 0.0
    for bad, words in [
        ({"tolerances": {}}, "unknown: tolerances"),
        ({"tolerance": {"recovery": 2}}, "between 0"),
        ({"tolerance": {"speed": 0.1}}, "unknown family"),
        ({"tolerance": {"dependency_violations": -1}}, "a number >= 0"),
        ([1], "a mapping"),
    ]:
        with pytest.raises(GateConfigError, match=words):
            parse_gate_config(bad)


def test_untrusted_case_ids_are_inert_in_both_outputs() -> None:
    evil = "x|<script>alert(1)</script>\n# `rm -rf` \x01\ud800"
    result = evaluate_gate(
        _figures("base"),
        _figures("cand<b>", hallucinated_tools=(1, 10)),
        GateConfig(),
        blocking_cases=[CaseRef(case_id=evil, trial=0, fault="", failures=("hallucinated_tool",))],
    )
    text = markdown(result)
    assert "<script>" not in text and "\\<script\\>" in text and "\n# " not in text and "\\|" in text
    assert md("a|b") == "a\\|b"
    root = ET.fromstring(junit(result).split("\n", 1)[1])
    names = [tc.get("name") for tc in root.iter("testcase")]
    assert any(n and n.startswith("x|<script>") and "\ufffd" in n for n in names)


def test_documented_config_and_workflow() -> None:
    import yaml

    from app.core.reports.gate import load_gate_config

    docs = Path(__file__).resolve().parents[2] / "docs"
    assert load_gate_config(docs / "gate.yaml") == GateConfig()  # the documented values are the defaults
    flow = yaml.safe_load((docs / "github-actions-gate.yml").read_text())
    steps = {s.get("name"): s for s in flow["jobs"]["gate"]["steps"]}
    assert "toollens gate --baseline baseline" in steps["Gate"]["run"]
    assert "--junit gate.xml" in steps["Gate"]["run"]
    assert "toollens run" in steps["Candidate run (this pull request)"]["run"]
