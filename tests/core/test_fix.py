"""`toollens fix`: proposals from each source on hand-written runs, in the
toolset's language; candidate suites that change only descriptions; the A/B
of --verify with the simulated agent; the model's rewrite against a scripted
endpoint, accepted and rejected."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.commands.fix_model import accepted
from app.core.advise.fix import CallFact, TrajectoryFact, apply_proposals, candidate_suite, propose, select
from app.core.suites.suite import load_suite_document, parse_suite
from app.core.suites.tools import Toolset
from app.runner.session import RunRequest, run_agent
from app.settings import Settings
from tests.fake_llm import FakeLLM, Turn, serve
from tests.resources import DATA, shared_data

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
runner = CliRunner()

ES = Toolset.from_list(
    [
        {
            "name": "buscar_pedido",
            "description": "Busca información.",
            "parameters": {
                "type": "object",
                "properties": {"numero": {"type": "string", "pattern": r"^PED-\d{5}$"}},
                "required": ["numero"],
            },
        },
        {
            "name": "buscar_producto",
            "description": "Busca información por texto.",
            "parameters": {"type": "object", "properties": {"consulta": {"type": "string"}}, "required": ["consulta"]},
        },
        {
            "name": "buscar_cliente",
            "description": "Busca un cliente por su RUT.",
            "parameters": {"type": "object", "properties": {"rut": {"type": "string"}}, "required": ["rut"]},
        },
        {
            "name": "emitir_nota_credito",
            "description": "Emite una nota de crédito por un monto.",
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "monto": {"type": "integer"},
                    "fecha": {"type": "string", "format": "date"},
                },
                "required": ["id", "monto"],
            },
        },
    ]
)

EN = Toolset.from_list(
    [
        {
            "name": "git_diff_staged",
            "description": "Shows changes that are staged for commit.",
            "parameters": {
                "type": "object",
                "properties": {"repo_path": {"type": "string"}},
                "required": ["repo_path"],
            },
        },
        {
            "name": "git_diff_unstaged",
            "description": "Shows changes in the working directory that are not yet staged.",
            "parameters": {
                "type": "object",
                "properties": {"repo_path": {"type": "string"}},
                "required": ["repo_path"],
            },
        },
        {
            "name": "git_log",
            "description": "Shows the commit logs.",
            "parameters": {
                "type": "object",
                "properties": {
                    "repo_path": {"type": "string"},
                    "max_count": {"type": "integer", "description": "Maximum number of commits to show"},
                },
                "required": ["repo_path"],
            },
        },
    ]
)


def traj(
    key: str,
    calls: list[CallFact],
    *,
    passed: bool = False,
    failures: tuple[str, ...] = ("selection",),
    question: str = "",
) -> TrajectoryFact:
    return TrajectoryFact(
        key=key,
        case_id=key.split("#")[0],
        question=question or f"q {key}",
        passed=passed,
        failures=() if passed else failures,
        calls=tuple(calls),
    )


def confused(n: int) -> list[TrajectoryFact]:
    """n failed trajectories calling buscar_producto for an order, and one passed one that did too (not counted)."""
    out = [
        traj(
            f"pedido-{i}#0",
            [CallFact("buscar_producto", {"consulta": "PED-12345"}, expected="buscar_pedido")],
            question="¿Dónde está mi pedido PED-12345?",
        )
        for i in range(n)
    ]
    out.append(traj("pedido-ok#0", [CallFact("buscar_producto", {}, expected="buscar_pedido")], passed=True))
    return out


def test_a_confused_pair_asks_for_negative_delimitation_and_distinct_descriptions_in_spanish() -> None:
    got = propose(ES, confused(3), examples={("buscar_pedido", "numero"): "PED-12345"})
    by = {(p.pattern, p.tool): p for p in got}
    neg = by[("negative_delimitation", "buscar_producto")]
    assert neg.where == "tool_description" and neg.partner == "buscar_pedido"
    # the partner's name words and ONE fact that tells them apart: the argument it takes, with its format
    assert (
        neg.after == 'Busca información por texto. NO sirve para buscar pedido por número (formato "PED-12345"): '
        "usa buscar_pedido."
    )
    assert neg.explains == 3 and neg.addresses.cells == {("buscar_pedido", "buscar_producto"): 3}
    assert neg.addresses.failures == {"selection": 3} and neg.addresses.cases == {"pedido-0", "pedido-1", "pedido-2"}
    # both descriptions are vague ("información"): each leads with its name's words and its argument's format
    assert (
        by[("distinct_names", "buscar_pedido")].after
        == 'Buscar pedido (por número, formato "PED-12345"). Busca información.'
    )
    assert (
        by[("distinct_names", "buscar_producto")].after == "Buscar producto (por consulta). "
        "Busca información por texto."
    )
    assert [p.number for p in got] == [1, 2, 3]


def test_a_tool_that_takes_the_partners_identifier_is_delimited_against_the_whole_action() -> None:
    # verificar_compra takes numero with buscar_pedido's pattern: both act on an order; what it is NOT for is
    # buscar_pedido's whole action, its object said ("para buscar" alone would say nothing a person would paste)
    verificar = {
        "name": "verificar_compra",
        "description": "Verifica información del cliente.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "numero": {"type": "string", "pattern": r"^PED-\d{5}$"}},
            "required": ["id", "numero"],
        },
    }
    shared = Toolset.from_list([*(t.document() for t in ES.tools), verificar])
    wrong = [
        traj("nota#0", [CallFact("verificar_compra", {"id": 1, "numero": "PED-12345"}, expected="buscar_pedido")]),
        traj("ver#0", [CallFact("buscar_pedido", {"numero": "PED-12345"}, expected="verificar_compra")]),
        traj("cli#0", [CallFact("verificar_compra", {"id": 1, "numero": "PED-1"}, expected="buscar_cliente")]),
    ]
    tails = {(p.tool, p.partner): p.tail for p in propose(shared, wrong) if p.pattern == "negative_delimitation"}
    assert tails == {
        ("verificar_compra", "buscar_pedido"): "NO sirve para buscar pedido: usa buscar_pedido.",
        # what numero identifies is a pedido, not a compra: verificar_compra's object stays; both read, and the
        # id buscar_pedido lacks is emitir_nota_credito's too: no fact tells them apart, none is made up (and
        # never the description pasted)
        ("buscar_pedido", "verificar_compra"): "NO sirve para verificar compra: usa verificar_compra.",
        # rut is buscar_cliente's alone, spelled as its description writes it
        ("verificar_compra", "buscar_cliente"): "NO sirve para buscar cliente por RUT: usa buscar_cliente.",
    }
    # and its own lead says what that identifier is: the object of the one tool that takes it alone
    leads = {
        p.tool: p.lead
        for p in propose(shared, wrong[2:], examples={("verificar_compra", "numero"): "PED-12345"})
        if p.pattern == "distinct_names"
    }
    assert leads == {"verificar_compra": 'Verificar compra (por número de pedido, formato "PED-12345").'}
    # the partner's description is never pasted, whatever it says
    described = Toolset.from_list(
        [
            {**t.document(), "description": "Busca un pedido por su número."}
            if t.name == "buscar_pedido"
            else t.document()
            for t in shared.tools
        ]
    )
    (neg,) = [p for p in propose(described, wrong[:1]) if p.pattern == "negative_delimitation"]
    assert neg.after == "Verifica información del cliente. NO sirve para buscar pedido: usa buscar_pedido."


def test_the_run_cells_are_reported_but_only_failed_trajectories_are_counted() -> None:
    got = propose(ES, confused(2), cells={("buscar_pedido", "buscar_producto"): 7})
    neg = next(p for p in got if p.pattern == "negative_delimitation")
    assert neg.addresses.cells == {("buscar_pedido", "buscar_producto"): 7} and neg.explains == 2


def test_argument_failures_name_the_type_the_valid_value_and_the_wrong_values_sent() -> None:
    calls = [
        CallFact(
            "emitir_nota_credito",
            {"id": 8812, "monto": "15.000"},
            expected="emitir_nota_credito",
            schema_field="monto",
            schema_message="field 'monto': expected integer, got string '15.000'",
        ),
        CallFact(
            "emitir_nota_credito",
            {"id": 8812, "monto": 15000, "fecha": "el martes pasado"},
            expected="emitir_nota_credito",
            schema_field="fecha",
            schema_message="field 'fecha': 'el martes pasado' is not a date",
        ),
    ]
    # a schema error on a confused call is the selection's doing: no argument proposal for it
    stray = CallFact(
        "buscar_pedido",
        {"numero": "12345678-9"},
        expected="buscar_cliente",
        schema_field="numero",
        schema_message="does not match",
    )
    got = propose(
        ES,
        [
            traj("nota-1#0", calls, failures=("schema",)),
            traj("nota-2#0", [calls[0]], failures=("schema",)),
            traj("x#0", [stray]),
        ],
        examples={("emitir_nota_credito", "monto"): 15000, ("emitir_nota_credito", "fecha"): "2024-03-12"},
    )
    fmt = {p.field: p for p in got if p.pattern == "argument_format"}
    assert set(fmt) == {"monto", "fecha"}
    assert (
        fmt["monto"].after == "Emite una nota de crédito por un monto. monto: número entero (p. ej. 15000), "
        'no "15.000".'
    )
    assert fmt["monto"].explains == 2 and fmt["fecha"].explains == 1
    assert fmt["fecha"].tail == 'fecha: texto, formato AAAA-MM-DD (p. ej. "2024-03-12"), no "el martes pasado".'


def test_a_parameter_with_its_own_description_gets_the_edit_there_in_english() -> None:
    call = CallFact(
        "git_log",
        {"repo_path": "/r", "max_count": "ten"},
        expected="git_log",
        schema_field="max_count",
        schema_message="field 'max_count': expected integer",
    )
    got = propose(EN, [traj("log#0", [call], failures=("schema",))], examples={("git_log", "max_count"): 10})
    (p,) = got
    assert (p.where, p.tool, p.field) == ("parameter_description", "git_log", "max_count")
    assert p.after == 'Maximum number of commits to show. max_count: an integer (e.g. 10), not "ten".'
    tools = apply_proposals([t.document() for t in EN.tools], got)
    assert tools[2]["parameters"]["properties"]["max_count"]["description"] == p.after
    assert tools[2]["description"] == "Shows the commit logs."


def test_english_pairs_get_english_templates() -> None:
    trajectories = [
        traj(f"d{i}#0", [CallFact("git_diff_unstaged", {"repo_path": "/r"}, expected="git_diff_staged")])
        for i in range(2)
    ]
    got = propose(EN, trajectories)
    (neg,) = [p for p in got if p.pattern == "negative_delimitation"]
    # both read and take the same argument: the partner's name words alone, never its description pasted
    assert neg.tail == "NOT for diff staged: use git_diff_staged."
    # "staged" is in git_diff_staged's description; "unstaged" is not in its own ("not yet staged")
    assert [(p.tool, p.lead) for p in got if p.pattern == "distinct_names"] == [
        ("git_diff_unstaged", "Diff unstaged.")
    ]  # repo_path, which both take, sets nothing apart


def test_a_broken_declared_pair_asks_for_the_precondition_with_what_flows_between_them() -> None:
    call = CallFact(
        "emitir_nota_credito",
        {"id": 8812, "monto": 100},
        expected="emitir_nota_credito",
        dependency_before="buscar_cliente",
    )
    got = propose(
        ES, [traj("n#0", [call], failures=("dependency",))], flows={("buscar_cliente", "emitir_nota_credito"): {"id"}}
    )
    (p,) = got
    assert (p.pattern, p.tool, p.partner) == ("precondition", "emitir_nota_credito", "buscar_cliente")
    assert p.tail == "Antes llama a buscar_cliente para obtener id."
    assert propose(ES, [traj("n#0", [call], failures=("dependency",))])[0].tail == "Antes llama a buscar_cliente."


def test_an_invented_tool_name_is_for_the_system_prompt() -> None:
    call = CallFact("cancelar_pedido", {}, exists=False, expected="buscar_pedido")
    got = propose(
        ES,
        [traj("p#0", [call], failures=("hallucinated_tool",)), traj("q#0", [call], failures=("hallucinated_tool",))],
        system_prompt="Eres un asistente.",
    )
    (p,) = got
    assert (p.where, p.pattern, p.applies, p.explains) == ("system_prompt", "known_tools", False, 2)
    # cancelling is not looking up: no declared tool means it, whatever step was expected
    assert p.after == (
        "Eres un asistente. La herramienta cancelar_pedido no existe. "
        "Usa solo las herramientas declaradas: buscar_pedido, buscar_producto, buscar_cliente, "
        "emitir_nota_credito."
    )


def test_a_blind_retry_after_a_lasting_error_is_for_the_error_message() -> None:
    first = CallFact(
        "buscar_cliente",
        {"rut": "1"},
        expected="buscar_cliente",
        error_kind="not_found",
        error_message="ERROR 404: not found",
        reaction="retry_same",
        reaction_ok=False,
    )
    transient = CallFact(
        "buscar_cliente",
        {"rut": "1"},
        expected="buscar_cliente",
        error_kind="http_503",
        error_message="ERROR 503",
        reaction="retry_same",
        reaction_ok=True,
    )
    got = propose(
        ES,
        [
            traj("c#0", [first], failures=("recovery_confused",)),
            traj("d#0", [transient], failures=("recovery_confused",)),
        ],
    )
    (p,) = got
    assert (p.where, p.tool, p.before) == ("error_message", "buscar_cliente", "ERROR 404: not found")
    assert p.after == "ERROR 404: not found. No repitas la misma llamada: confirma rut con el usuario."


def test_ranking_puts_what_explains_most_failed_trajectories_first() -> None:
    call = CallFact("cancelar_pedido", {}, exists=False)
    got = propose(ES, [*confused(1), traj("p#0", [call]), traj("q#0", [call]), traj("r#0", [call])])
    assert got[0].pattern == "known_tools" and got[0].explains == 3 and got[0].number == 1
    assert select(got, [2, 1]) == [got[1], got[0]]
    with pytest.raises(ValueError, match="no proposal numbered 99"):
        select(got, [99])


def _without_descriptions(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_descriptions(v) for k, v in doc.items() if k not in ("description", "label")}
    if isinstance(doc, list):
        return [_without_descriptions(v) for v in doc]
    return doc


@pytest.fixture()
def v1_run(db_url: str) -> str:
    url = db_url
    out = run_agent(
        Settings(database_url=url),
        RunRequest(agent="simulated", suite_path=EXAMPLES / "suite_v1.yaml", sweep=True, run_name="v1", seed=5),
    )
    assert out.finished
    return url


def test_fix_json_out_and_only_round_trip(v1_run: str, tmp_path: Path) -> None:
    done = runner.invoke(cli, ["fix", "v1", "--json", "--db", v1_run])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["run"] == "v1" and data["failed_trajectories"] > 0 and data["proposals"]
    first = data["proposals"][0]
    assert set(first) >= {
        "number",
        "where",
        "pattern",
        "tool",
        "field",
        "partner",
        "before",
        "after",
        "applies",
        "evidence",
        "addresses",
        "source",
    }
    assert set(first["addresses"]) == {"failed_trajectories", "cells", "failures", "cases"}
    counts = [p["addresses"]["failed_trajectories"] for p in data["proposals"]]
    assert counts == sorted(counts, reverse=True)
    written = [p for p in data["proposals"] if p["applies"]]
    picked = [written[0]["number"], written[2]["number"]]
    out = tmp_path / "cand.yaml"
    done = runner.invoke(cli, ["fix", "v1", "--out", str(out), "--only", ",".join(map(str, picked)), "--db", v1_run])
    assert done.exit_code == 0, done.output
    original = load_suite_document(EXAMPLES / "suite_v1.yaml")
    candidate = yaml.safe_load(out.read_text(encoding="utf-8"))
    # names, schemas, mocks and cases byte-identical; the label is new; only the picked descriptions changed
    assert json.dumps(_without_descriptions(candidate), sort_keys=True) == json.dumps(
        _without_descriptions(original), sort_keys=True
    )
    assert json.dumps(candidate["cases"], sort_keys=True) == json.dumps(original["cases"], sort_keys=True)
    assert candidate["toolset"]["label"] == f"v1+fix{picked[0]},{picked[1]}"
    before = {t["name"]: t["description"] for t in original["toolset"]["tools"]}
    after = {t["name"]: t["description"] for t in candidate["toolset"]["tools"]}
    changed = {n for n in after if after[n] != before[n]}
    assert changed == {written[0]["tool"], written[2]["tool"]}
    for p in (written[0], written[2]):
        assert p["after"].replace(p["before"], "").strip(" .") in after[p["tool"]]
    assert "{+" in done.stderr  # the word diff, printed
    parse_suite(candidate)  # a valid suite
    bad = runner.invoke(cli, ["fix", "v1", "--out", str(out), "--only", "999", "--force", "--db", v1_run])
    assert bad.exit_code == 2 and "no proposal numbered 999" in bad.output


def test_candidate_suite_keeps_a_bare_tool_list_and_other_shapes() -> None:
    doc = {
        "name": "s",
        "toolset": [
            {
                "type": "function",
                "function": {
                    "name": "buscar_producto",
                    "description": "Busca información por texto.",
                    "parameters": {"type": "object"},
                },
            },
            {"name": "buscar_pedido", "description": "Busca información.", "input_schema": {"type": "object"}},
        ],
        "cases": [],
    }
    (neg,) = [p for p in propose(ES, confused(1)) if p.pattern == "negative_delimitation"]
    cand = candidate_suite(doc, [neg])
    assert cand["toolset"]["tools"][0]["function"]["description"].endswith("usa buscar_pedido.")
    assert cand["toolset"]["tools"][1] == doc["toolset"][1]
    assert cand["toolset"]["label"] == f"v+fix{neg.number}"


def test_verify_runs_the_candidate_with_the_same_settings_and_prints_the_ab(v1_run: str, tmp_path: Path) -> None:
    md = tmp_path / "pr.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "fix",
            "v1",
            "--verify",
            "--markdown",
            str(md),
            "--db",
            v1_run,
            "--config",
            str(ROOT / "docs" / "gate.yaml"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    out = done.stdout
    assert "candidate run 2 (v1-fix-1): 50 case runs, same agent settings, trials and seeds as v1" in out
    assert re.search(r"confusions \(calls to another tool than the expected one\): \d+ → \d+", out)
    assert re.search(r"selection_precision: \d+/\d+ .* \[95% [-+][\d.]+, [-+][\d.]+\]", out)
    assert "McNemar (exact) on 50 shared trajectories" in out
    assert re.search(r"cases whose failures drove the proposals \(\d+ cases\)", out) and "the other cases (" in out
    verdict = "gate passed" if done.returncode == 0 else "gate FAILED"
    assert f"{verdict}: v1 -> v1-fix-1" in out
    gate = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "gate",
            "--baseline",
            "v1",
            "--candidate",
            "v1-fix-1",
            "--config",
            str(ROOT / "docs" / "gate.yaml"),
            "--db",
            v1_run,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gate.returncode == done.returncode  # the exit code of `toollens gate`
    body = md.read_text(encoding="utf-8")
    assert body.startswith("## Tool descriptions rewritten from run v1")
    assert "### Descriptions (~~removed~~, **added**)" in body and "| family | before | after |" in body
    assert "Exact McNemar on 50 shared trajectories" in body and "ToolLens gate" in body
    # who judged: the simulated agent, said to be a model of a model, with the commands for a real one
    assert "judged by: the simulated agent (seed 5) on both sides (v1 and v1-fix-1): a model of a model" in out
    assert "toollens run candidate.yaml --agent openai --model MODEL --base-url URL --trials 1" in out
    assert "toollens gate --baseline v1-real --candidate v1-fix-1-real" in out
    assert "### Who judged" in body and "a model of a model" in body and "--agent openai --model MODEL" in body
    # one verdict per family, stated once: the gate's own families table is not repeated
    rows = [line for line in body.splitlines() if line.startswith("| selection_precision |")]
    assert len(rows) == 1 and "| family | baseline | candidate |" not in body
    assert not [line for line in out.splitlines() if "within noise" in line and re.search(r"pass|regressed", line)]
    taken = runner.invoke(cli, ["fix", "v1", "--verify", "--verify-run", "v1-fix-1", "--db", v1_run])
    assert taken.exit_code == 2 and "--verify-run v1-fix-1: a run with that name exists already" in taken.output
    assert "--resume" not in taken.output
    with_config = json.loads(
        subprocess.run(
            [sys.executable, "-m", "app.cli", "fix", "v1-fix-1", "--json", "--db", v1_run],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert with_config["run"] == "v1-fix-1"


def test_verify_refuses_a_run_not_made_by_toollens_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'imp.db'}"
    done = runner.invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "imported",
            "--db",
            url,
        ],
    )
    assert done.exit_code == 0, done.output
    done = runner.invoke(cli, ["fix", "imported", "--verify", "--db", url])
    assert done.exit_code == 2 and "was not made by `toollens run`" in done.output


A = {"name": "buscar_pedido", "description": "Busca información.", "parameters": {"type": "object"}}
B = {"name": "buscar_producto", "description": "Busca información por texto.", "parameters": {"type": "object"}}


def test_a_rewrite_is_accepted_only_when_it_keeps_the_rules() -> None:
    good = {
        "descriptions": {
            "buscar_pedido": "Busca un pedido por numero PED-12345. NO para productos: usa buscar_producto.",
            "buscar_producto": "Busca productos por texto. NO para pedidos: usa buscar_pedido.",
        }
    }
    assert accepted("Here: " + json.dumps(good), A, B) == good["descriptions"]
    renamed = {"descriptions": {"buscar_pedidos": "x buscar_producto", "buscar_producto": "y buscar_pedido"}}
    no_partner = {"descriptions": {"buscar_pedido": "Busca un pedido.", "buscar_producto": "y buscar_pedido"}}
    schema = {**good, "parameters": {"type": "object"}}
    for bad in (renamed, no_partner, schema):
        assert accepted(json.dumps(bad), A, B) is None
    assert accepted("not json", A, B) is None


def test_model_rewrites_the_worst_pair_and_the_templates_stand_when_it_breaks_the_rules(
    v1_run: str, tmp_path: Path
) -> None:
    def rewrite(request: dict[str, Any]) -> Turn:
        prompt = request["messages"][1]["content"]
        names = re.findall(r'"name": "([a-z_]+)"', prompt)
        if "buscar_pedido" in names:  # a good rewrite of the pairs with buscar_pedido
            a, b = names
            return Turn(
                text=json.dumps(
                    {
                        "descriptions": {
                            a: f"Para {a} solamente. NO para lo otro: usa {b}.",
                            b: f"Para {b} solamente. NO para lo otro: usa {a}.",
                        }
                    }
                )
            )
        return Turn(text=json.dumps({"descriptions": {n: "Sin nombrar a la otra." for n in names}}))

    app = FakeLLM(responder=rewrite)
    with serve(app) as base:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli",
                "fix",
                "v1",
                "--json",
                "--model",
                "m-1",
                "--base-url",
                f"{base}/v1",
                "--db",
                v1_run,
                "--out",
                str(tmp_path / "m.yaml"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={"OPENAI_API_KEY": "k", "PATH": "/usr/bin:/bin"},
        )
    assert done.returncode == 0, done.stderr
    proposals = json.loads(done.stdout)["proposals"]
    model = [p for p in proposals if p["source"] == "model"]
    assert model and all("buscar_pedido" in (p["tool"], p["partner"]) for p in model)
    assert all(p["after"].startswith(f"Para {p['tool']} solamente.") for p in model)
    candidate = yaml.safe_load((tmp_path / "m.yaml").read_text(encoding="utf-8"))
    written = {t["name"]: t["description"] for t in candidate["toolset"]["tools"]}
    for p in model:  # the model's text replaces the description; template edits of other patterns may follow it
        assert written[p["tool"]].startswith(p["after"])
    assert app.requests and app.requests[0]["temperature"] == 0
    assert "NOT for X: use other_tool" in app.requests[0]["messages"][0]["content"]
    rejected = [r for r in app.requests if '"name": "buscar_pedido"' not in r["messages"][1]["content"]]
    assert rejected  # asked, answered without naming the partner: the templates stand for those tools
    kept = {p["tool"] for p in proposals if p["source"] == "deterministic" and p["pattern"] == "negative_delimitation"}
    assert kept and not kept & {p["tool"] for p in model}


def test_a_description_that_names_its_tool_but_not_the_argument_that_sets_it_apart_gets_a_lead() -> None:
    calls = [CallFact("buscar_pedido", {"numero": "12345678-9"}, expected="buscar_cliente")]
    got = propose(ES, [traj("c#0", calls)])
    assert [p.tool for p in got if p.pattern == "distinct_names"] == ["buscar_pedido"]  # "cliente … RUT" is said
    vague = Toolset.from_list(
        [
            {**t.document(), "description": "Busca un cliente."} if t.name == "buscar_cliente" else t.document()
            for t in ES.tools
        ]
    )
    leads = {p.tool: p.lead for p in propose(vague, [traj("c#0", calls)]) if p.pattern == "distinct_names"}
    assert leads["buscar_cliente"] == "Buscar cliente (por rut)."


def test_an_english_toolset_gets_english_proposals_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'git.db'}"
    out = run_agent(
        Settings(database_url=url),
        RunRequest(
            agent="simulated", trials=5, seed=3, run_name="git", suite_path=ROOT / "tests/fixtures/mcp/git_cases.yaml"
        ),
    )
    assert out.finished
    done = runner.invoke(cli, ["fix", "git", "--json", "--db", url])
    assert done.exit_code == 0, done.output
    proposals = json.loads(done.stdout)["proposals"]
    negative = [p for p in proposals if p["pattern"] == "negative_delimitation"]
    assert negative and all(
        re.fullmatch(
            r"NOT for [a-z ]+( by [a-z_]+| \(that one (only reads|makes changes)\))?: "
            r"use git_[a-z_]+\.",
            p["after"][len(p["before"]) :].lstrip(". "),
        )
        for p in negative
    )
    assert all(p["partner"] in p["after"] for p in negative)
    texts = " ".join(p["after"] for p in proposals)
    assert not re.search(r"\b(NO sirve|usa|entero|formato|Antes llama)\b", texts)  # nothing in Spanish


def test_where_the_run_knows_what_sank_each_trajectory_a_proposal_explains_only_those() -> None:
    wrong = CallFact("buscar_producto", {"consulta": "PED-1"}, expected="buscar_pedido")
    unknown = CallFact("cancelar_pedido", {}, exists=False)
    sunk_by_choice = TrajectoryFact(
        "a#0",
        "a",
        "q",
        False,
        ("selection", "hallucinated_tool"),
        (wrong, unknown),
        cause=("wrong_tool", "buscar_pedido", "buscar_producto"),
    )
    sunk_by_name = TrajectoryFact(
        "b#0",
        "b",
        "q",
        False,
        ("selection", "hallucinated_tool"),
        (wrong, unknown),
        cause=("hallucinated_tool", "cancelar_pedido", ""),
    )
    got = {p.pattern: p for p in propose(ES, [sunk_by_choice, sunk_by_name])}
    assert got["negative_delimitation"].addresses.trajectories == {"a#0"}
    assert got["known_tools"].addresses.trajectories == {"b#0"}
    assert got["known_tools"].addresses.failures == {"selection": 1, "hallucinated_tool": 1}


def test_no_format_proposal_where_the_description_already_states_it() -> None:
    stated = Toolset.from_list(
        [
            {
                "name": "ver_saldo",
                "description": "Devuelve el saldo. Requiere el id interno (entero, por ejemplo 8812).",
                "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            },
            {
                "name": "emitir_nota_credito",
                "description": "Emite una nota de crédito.",
                "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            },
        ]
    )
    calls = [
        CallFact(n, {"id": "8812"}, expected=n, schema_field="id", schema_message="expected integer")
        for n in ("ver_saldo", "emitir_nota_credito")
    ]
    got = propose(stated, [traj("s#0", calls, failures=("schema",))])
    assert [(p.tool, p.tail) for p in got] == [("emitir_nota_credito", 'id: número entero, no "8812".')]


def test_pair_applies_the_edits_of_one_pair_as_the_run_page_shows_them(v1_run: str, tmp_path: Path) -> None:
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store
    from app.store.pairs import run_pair_proposals

    engine = open_store(Settings(database_url=v1_run))
    with session_scope(make_sessionmaker(engine)) as session:
        name, shown_on_page = run_pair_proposals(session, 1)
    engine.dispose()
    assert name == "v1"
    out = tmp_path / "pair.json"
    done = runner.invoke(
        cli, ["fix", "v1", "--json", "--pair", "buscar_pedido,buscar_cliente", "--out", str(out), "--db", v1_run]
    )
    assert done.exit_code == 0, done.output
    cli_pair = [
        p
        for p in json.loads(done.stdout)["proposals"]
        if p["pattern"] in ("negative_delimitation", "distinct_names")
        and {p["tool"], p["partner"]} == {"buscar_pedido", "buscar_cliente"}
    ]
    page_pair = [p for p in shown_on_page if {p.tool, p.partner} == {"buscar_pedido", "buscar_cliente"}]
    assert sorted((p["tool"], p["after"]) for p in cli_pair) == sorted((p.tool, p.after) for p in page_pair)
    written = {t["name"]: t["description"] for t in json.loads(out.read_text(encoding="utf-8"))["toolset"]["tools"]}
    v1 = load_suite_document(EXAMPLES / "suite_v1.yaml")
    original = {t["name"]: t["description"] for t in v1["toolset"]["tools"]}
    assert {n for n in written if written[n] != original[n]} == {p["tool"] for p in cli_pair}
    bad = runner.invoke(
        cli, ["fix", "v1", "--pair", "ver_saldo,iniciar_devolucion", "--out", str(out), "--force", "--db", v1_run]
    )
    assert bad.exit_code == 2 and "no description edit for that pair" in bad.output


def test_the_causes_the_run_tagged_decide_what_each_proposal_explains(v1_run: str) -> None:
    from sqlalchemy import delete as sql_delete
    from sqlalchemy import select as sql_select

    from app.store.db import make_sessionmaker, session_scope
    from app.store.fix import run_fix
    from app.store.importer import open_store
    from app.store.models import TrajectoryRow, TrajectoryTag

    engine = open_store(Settings(database_url=v1_run))
    sessions = make_sessionmaker(engine)
    with session_scope(sessions) as session:
        before = run_fix(session, "v1").proposals
    assert before[0].explains > 0
    with session_scope(sessions, write=True) as session:  # every failed trajectory sunk by its final state
        session.execute(sql_delete(TrajectoryTag).where(TrajectoryTag.kind == "cause"))
        for (tid,) in session.execute(sql_select(TrajectoryRow.id).where(TrajectoryRow.passed.is_(False))):
            session.add(TrajectoryTag(trajectory_id=tid, kind="cause", value="state:%3Aodd:saldo", run_id=1))
    with session_scope(sessions) as session:
        after = run_fix(session, "v1").proposals
    engine.dispose()
    assert [p.explains for p in after] == [0] * len(after) and len(after) == len(before)


TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
TAU_TOOLS = DATA / "tau_bench_tool_schemas_airline_retail.json"


@shared_data(TAU, TAU_TOOLS)
def test_on_real_tau_bench_runs_only_the_blind_booking_retries_call_for_an_edit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tau.db'}"
    done = runner.invoke(
        cli,
        [
            "import",
            str(TAU),
            "--format",
            "tau-bench",
            "--tools",
            str(TAU_TOOLS),
            "--domain",
            "airline",
            "--run",
            "tau",
            "--db",
            url,
        ],
    )
    assert done.exit_code == 0, done.output
    done = runner.invoke(cli, ["fix", "tau", "--json", "--db", url])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["failed_trajectories"] == 69
    # task-8 trial 1 (twice), task-9 trial 2 (three times), task-11 trial 2: the same booking after "does not add
    # up"; the rest are wrong values of the right shape (bags, cabin, trip type), for which no format is proposed
    (p,) = data["proposals"]
    assert (p["where"], p["tool"], p["addresses"]["failed_trajectories"]) == ("error_message", "book_reservation", 3)
    assert p["before"] == "Error: payment amount does not add up, total price is 1203, but paid 833"
    assert p["after"].endswith(
        "Do not repeat the same call: it fails again with the same arguments; change them or tell the user."
    )
    assert p["addresses"]["cases"] == ["task-11", "task-8", "task-9"]


def test_out_refuses_an_existing_file_or_a_symlink_and_writes_atomically(
    v1_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "suite.yaml"
    mine.write_text("# hand-written\n", encoding="utf-8")
    done = runner.invoke(cli, ["fix", "v1", "--out", str(mine), "--db", v1_run])
    assert done.exit_code == 2 and "the file exists" in done.output and "--force" in done.output
    assert mine.read_text(encoding="utf-8") == "# hand-written\n"
    target = tmp_path / "elsewhere.yaml"
    target.write_text("keep\n", encoding="utf-8")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    for flag in ("--out", "--markdown"):
        done = runner.invoke(cli, ["fix", "v1", flag, str(link), "--force", "--db", v1_run])
        assert done.exit_code == 2 and "symbolic link" in done.output
    assert target.read_text(encoding="utf-8") == "keep\n" and link.is_symlink()
    done = runner.invoke(cli, ["fix", "v1", "--out", str(mine), "--force", "--db", v1_run])
    assert done.exit_code == 0 and "toolset" in yaml.safe_load(mine.read_text(encoding="utf-8"))
    fresh = tmp_path / "fresh.yaml"
    assert runner.invoke(cli, ["fix", "v1", "--out", str(fresh), "--db", v1_run]).exit_code == 0
    import os
    import stat

    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask  # a new file, not the temporary file's 0600

    import app.core.suites.suitefile as suitefile

    def killed(fd: int) -> None:
        raise KeyboardInterrupt  # interrupted between writing and renaming

    monkeypatch.setattr(suitefile.os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        from app.commands.fix import write_file

        write_file(tmp_path / "new.yaml", b"x")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".new.yaml")]  # no temporary file left
    assert not (tmp_path / "new.yaml").exists()


def test_control_characters_of_a_description_are_escaped_in_the_terminal() -> None:
    from rich.console import Console

    from app.commands.fix import _print

    hostile = Toolset.from_list(
        [
            {**t.document(), "description": "Busca\x1b[2J información.\x07"}
            if t.name == "buscar_producto"
            else t.document()
            for t in ES.tools
        ]
    )
    console = Console(record=True, width=300, force_terminal=False)
    proposals = propose(hostile, confused(1))
    _print(console, "v1\x1b]0;x\x07", 1, proposals, len(proposals))
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "Busca\\x1b[2J información.\\x07" in text and "run v1\\x1b]0;x\\x07" in text


def test_advice_is_listed_apart_and_not_written_and_each_proposal_has_one_count(v1_run: str, tmp_path: Path) -> None:
    data = json.loads(runner.invoke(cli, ["fix", "v1", "--json", "--db", v1_run]).stdout)["proposals"]
    advice = [p["number"] for p in data if p["advice"]]
    explaining = [p["number"] for p in data if not p["advice"]]
    assert advice and explaining and max(explaining) < min(advice)  # ranked after what explains a failure
    assert all(p["advice"] == (p["addresses"]["failed_trajectories"] == 0) for p in data)
    assert not [e for p in data for e in p["evidence"] if "trajector" in e]  # the one count is "explains N"
    out = tmp_path / "c.yaml"
    done = runner.invoke(cli, ["fix", "v1", "--out", str(out), "--db", v1_run, "--top", "1000"])
    assert done.exit_code == 0, done.output
    label = yaml.safe_load(out.read_text(encoding="utf-8"))["toolset"]["label"]
    written = {int(n) for n in label.split("+fix")[1].split(",")}
    applied = {p["number"] for p in data if p["applies"]}
    assert written == applied - set(advice)
    text = done.stdout
    assert text.index("advice: each explains no failed trajectory") < text.index(f"#{min(advice)} ")
