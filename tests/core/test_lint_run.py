"""The linter on real toolsets: suggested wording in the toolset's language
and free of the demo's domain words, and ``toollens lint --run`` putting
the pairs a stored run confused first, each reported whether or not the
two read alike."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.core.advise.lint import lint_json, lint_toolset, load_lint_target
from app.core.suites.suite import load_toolset
from app.core.suites.tools import Toolset
from tests.resources import DATA, shared_data

ROOT = Path(__file__).resolve().parents[2]
GIT = ROOT / "tests" / "fixtures" / "mcp" / "mcp-server-git.json"
EXAMPLES = ROOT / "examples"
runner = CliRunner()
DEMO_WORDS = ("entero", "RUT", "15.000", "sirve", "usa ", "Obtén", "solo si", "confirma con")


def test_an_english_toolset_gets_english_wording_and_no_demo_words() -> None:
    git = load_toolset(GIT)
    data = lint_json(git, lint_toolset(git))
    assert data["language"] == "en"
    text = json.dumps(data, ensure_ascii=False)
    assert not [w for w in DEMO_WORDS if w in text]
    messages = {f["message"] for f in data["findings"]}
    assert (
        'git_log.max_count: the description does not state its integer type (say "integer" next to the '
        'field: 42, not "42" or 42.0)'
    ) in messages
    assert (
        'git_branch has look-alikes (git_create_branch) but never says what it is not for: add "not for X: '
        'use git_create_branch"'
    ) in messages
    assert (
        "git_reset is destructive (its server says so) but its description states no precondition and no "
        'confirmation step: say when it may run ("only after …", "confirm with the user first")'
    ) in messages
    out = runner.invoke(cli, ["lint", str(GIT)]).stdout
    assert "not for X: use git_diff_unstaged" in out and not [w for w in DEMO_WORDS if w in out]


def test_a_spanish_toolset_gets_spanish_wording() -> None:
    v1 = load_toolset(EXAMPLES / "toolset_v1.yaml")
    found = lint_toolset(v1)
    messages = {f.message for f in found}
    assert (
        'ver_saldo.id: the description does not state its integer type (say "entero" next to the field: '
        '42, not "42" or 42.0)'
    ) in messages
    assert (
        "ver_saldo must come after buscar_cliente (declared pair) but its description does not say so: add "
        '"Obtén … con buscar_cliente primero"'
    ) in messages
    assert any('add "NO sirve para X: usa ' in m for m in messages)
    assert not [m for m in messages if "not for X" in m or "call buscar_cliente first" in m]
    # the language can be forced
    english = {f.message for f in lint_toolset(v1, language="en")}
    assert any('add "not for X: use ' in m for m in english)
    out = runner.invoke(cli, ["lint", str(EXAMPLES / "toolset_v1.yaml")]).stdout
    assert 'add "NO sirve para X: usa buscar_producto"' in out and "not for X" not in out


MATH = DATA / "bfcl" / "multi_turn_func_doc" / "math_api.json"


@shared_data(MATH)
def test_a_field_s_own_description_states_its_type_or_values() -> None:
    """BFCL's Math API: "First number." says a float field's type; "The base of the logarithm." does not."""
    tools = Toolset.from_list([json.loads(line) for line in MATH.read_text().splitlines() if line.strip()])
    fields = {(f.tool, f.field) for f in lint_toolset(tools) if f.rule == "argument_format"}
    assert not fields & {("add", "a"), ("add", "b"), ("multiply", "a"), ("logarithm", "value"), ("power", "base")}
    assert {("logarithm", "base"), ("logarithm", "precision"), ("power", "exponent")} <= fields


SHOP = {
    "name": "tienda",
    "toolset": [
        {
            "name": "buscar_pedido",
            "description": "Busca un pedido por su numero (formato PED-12345).",
            "parameters": {"type": "object", "properties": {"numero": {"type": "string"}}},
        },
        {
            "name": "buscar_producto",
            "description": "Busca un producto por su SKU.",
            "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
        },
        {
            "name": "buscar_cliente",
            "description": "Busca un cliente por su correo.",
            "parameters": {"type": "object", "properties": {"correo": {"type": "string"}}},
        },
        {
            "name": "ver_envio",
            "description": "Muestra dónde va el envío de un pedido.",
            "parameters": {"type": "object", "properties": {"numero": {"type": "string"}}},
        },
    ],
    "cases": [
        {
            "id": "pedido",
            "question": "¿Cómo va el pedido PED-12345?",
            "expected_calls": [{"name": "buscar_pedido", "arguments": {"numero": "PED-12345"}}],
        },
        {
            "id": "producto",
            "question": "¿Tienen el SKU AUD-220?",
            "expected_calls": [{"name": "buscar_producto", "arguments": {"sku": "AUD-220"}}],
        },
    ],
}


def _record(case: str, trial: int, name: str, arguments: dict[str, str]) -> str:
    return json.dumps(
        {
            "case_id": case,
            "trial": trial,
            "calls": [{"name": name, "arguments": arguments, "observation": "{}", "error": None}],
            "answer": "ok",
        }
    )


def test_lint_run_reports_the_pairs_the_run_confused_first(tmp_path: Path) -> None:
    suite = tmp_path / "tienda.yaml"
    suite.write_text(yaml.safe_dump(SHOP, allow_unicode=True), encoding="utf-8")
    # no lexical finding on the course's canonical pair: "buscar" is every name's verb, and the descriptions
    # share only it and "por su"
    plain = lint_toolset(load_lint_target(suite)[0])
    assert not [f for f in plain if {"buscar_pedido", "buscar_producto"} <= set(f.tools)]
    # a run: buscar_producto called where buscar_pedido was expected 3 times, the other way once
    records = [_record("pedido", t, "buscar_producto", {"sku": "PED-12345"}) for t in range(3)]
    records += [
        _record("pedido", 3, "buscar_pedido", {"numero": "PED-12345"}),
        _record("producto", 0, "buscar_pedido", {"numero": "AUD-220"}),
        _record("producto", 1, "buscar_producto", {"sku": "AUD-220"}),
    ]
    trajectories = tmp_path / "run.jsonl"
    trajectories.write_text("\n".join(records) + "\n", encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    done = runner.invoke(cli, ["import", str(trajectories), "--suite", str(suite), "--run", "tienda-1", "--db", db])
    assert done.exit_code == 0, done.output

    r = runner.invoke(cli, ["lint", str(suite), "--run", "tienda-1", "--db", db])
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0].endswith("; run tienda-1: 4 confusions")
    # descriptions: only "busca" shared, in 3 of 4 (ln 5/3 = 0.511); pedido's words weigh 0.511 + ln 2.5 (pedido,
    # also ver_envio's) + 3 ln 5 = 6.255, producto's 0.511 + 2 ln 5 = 3.730: Dice 2 × 0.511 / 9.985 = 0.10
    assert lines[1] == "buscar_pedido ~ buscar_producto  (similarity 0.10)  confused 4× in the run"
    assert lines[2] == (
        "  confused_pair  buscar_producto was called where buscar_pedido was expected (3 in the run, "
        "and 1 the other way): read both descriptions as the model would and say what each is not "
        "for"
    )
    assert lines[3:5] == [
        '  no_negative_delimitation  buscar_pedido never says what it is not for: add "NO sirve para X: usa '
        'buscar_producto"',
        '  no_negative_delimitation  buscar_producto never says what it is not for: add "NO sirve para X: usa '
        'buscar_pedido"',
    ]

    data = json.loads(runner.invoke(cli, ["lint", str(suite), "--run", "tienda-1", "--db", db, "--json"]).stdout)
    assert data["run"]["name"] == "tienda-1" and data["run"]["confusions"] == [
        {"expected": "buscar_pedido", "called": "buscar_producto", "count": 3},
        {"expected": "buscar_producto", "called": "buscar_pedido", "count": 1},
    ]
    assert data["counts"]["confused_pair"] == 1 and data["counts"]["no_negative_delimitation"] == 2
    first = data["findings"][0]
    assert (first["rule"], first["tool"], first["related"]) == ("confused_pair", "buscar_pedido", ["buscar_producto"])
    assert first["detail"]["confusions"] == 4
    # without --run the JSON keeps its keys (no "run", no confused_pair count)
    data = json.loads(runner.invoke(cli, ["lint", str(suite), "--json"]).stdout)
    assert "run" not in data and "confused_pair" not in data["counts"]
    r = runner.invoke(cli, ["lint", str(suite), "--run", "nope", "--db", db])
    assert r.exit_code == 2 and "no run 'nope'" in r.stderr
