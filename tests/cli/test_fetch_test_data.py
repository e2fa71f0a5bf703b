"""scripts/fetch_test_data.py, checked offline against the local copy of the public samples:
its list names every file the tests read with its SHA-256, and its two derived files come out
byte for byte as the copy holds them (the download replaced by the local bytes)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.resources import DATA, ROOT, shared_data

SCRIPT = ROOT / "scripts" / "fetch_test_data.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_test_data", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_test_data"] = module
    spec.loader.exec_module(module)
    return module


@shared_data(DATA / "tau_bench_gpt-4o_airline_tasks00-24.json")
def test_the_list_is_the_local_copy_file_for_file() -> None:
    fetch = load()
    assert fetch.check(DATA) == []
    listed = {s.path for s in fetch.SAMPLES}
    present = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "README.md"}
    assert listed == present
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(DATA), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == f"{len(listed)} files in {DATA}, as listed\n"


def test_a_file_that_differs_is_named(tmp_path: Path) -> None:
    (tmp_path / "bfcl").mkdir()
    (tmp_path / "bfcl" / "BFCL_v4_irrelevance.json").write_text("{}\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert (
        "error: bfcl/BFCL_v4_irrelevance.json: differs from ShishirPatil/gorilla@6ea57973 "
        "(berkeley-function-call-leaderboard/bfcl_eval/data/BFCL_v4_irrelevance.json)" in lines
    )
    assert "error: toolbench/instruction_G1_query.json: missing" in lines


@shared_data(
    DATA / "tau_bench_gpt-4o_airline_tasks00-24.json",
    DATA / "tau_bench_tool_schemas_airline_retail.json",
    DATA / "bfcl",
    DATA / "toolbench",
    DATA / "tau2",
    DATA / "inspect",
)
def test_the_derived_files_come_out_as_the_copy_holds_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fetch = load()
    runs = (DATA / "tau_bench_gpt-4o_airline_tasks00-24.json").read_bytes()
    schemas = json.loads((DATA / "tau_bench_tool_schemas_airline_retail.json").read_bytes())
    later_task = json.loads(runs)[:1]
    later_task[0] = {**later_task[0], "task_id": 25}
    full = json.dumps([*json.loads(runs), *later_task]).encode()  # a task past 24 is left out
    asked: list[str] = []

    def download(repo: str, commit: str, path: str) -> bytes:
        asked.append(f"{repo}@{commit}:{path}")
        if path == "historical_trajectories/gpt-4o-airline.json":
            return full
        if not path.endswith(".py"):  # a file copied as is: the copy's bytes
            return (DATA / next(s.path for s in fetch.SAMPLES if (s.repo, s.source) == (repo, path))).read_bytes()
        domain, name = path.split("/")[-3], path.split("/")[-1].removesuffix(".py")
        definition = next(t for t in schemas[domain] if t["function"]["name"] == name)
        return f"class Tool:\n    @staticmethod\n    def get_info():\n        return {definition!r}\n".encode()

    monkeypatch.setattr(fetch, "download", download)
    assert fetch.fetch(tmp_path) == []
    for sample in fetch.SAMPLES:
        assert (tmp_path / sample.path).read_bytes() == (DATA / sample.path).read_bytes()
    assert asked[0] == "sierra-research/tau-bench@59a200c6:historical_trajectories/gpt-4o-airline.json"
    assert "sierra-research/tau-bench@59a200c6:tau_bench/envs/retail/tools/think.py" in asked
    assert len(asked) == 1 + 14 + 16 + len(fetch.SAMPLES) - 2
    assert (
        fetch.url("OpenBMB/ToolBench", "d56fdd8", "data_example/instruction/G1_query.json")
        == "https://github.com/OpenBMB/ToolBench/raw/d56fdd8/data_example/instruction/G1_query.json"
    )
