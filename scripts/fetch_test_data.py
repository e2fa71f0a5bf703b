"""Fetch the public agent runs some tests read (tau-bench, τ²-bench, BFCL, ToolBench, Inspect
AI), each from its repository at a fixed commit, into the layout the tests expect
(docs/operations.md#test-data).

    python scripts/fetch_test_data.py DEST          # e.g. ../shared/data, or set TOOLLENS_TEST_DATA=DEST
    python scripts/fetch_test_data.py DEST --check  # only compare DEST with the list (no network)

Every file is checked against its SHA-256 below: a file that differs is reported and the script
exits 1 (nothing half-written is left: a file is written whole once it checks). Two files are
derived, not copied: the first 25 tasks of tau-bench's gpt-4o airline runs, and the tool
definitions tau-bench's tools return from ``get_info()``, read from their source without running
it. Standard library only. The data is third-party: each repository's licence applies.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TAU = ("sierra-research/tau-bench", "59a200c6")
BFCL = ("ShishirPatil/gorilla", "6ea57973")
BFCL_DATA = "berkeley-function-call-leaderboard/bfcl_eval/data"
TOOLBENCH = ("OpenBMB/ToolBench", "d56fdd8")
TAU_AIRLINE_TOOLS = (
    "book_reservation",
    "calculate",
    "cancel_reservation",
    "get_reservation_details",
    "get_user_details",
    "list_all_airports",
    "search_direct_flight",
    "search_onestop_flight",
    "send_certificate",
    "think",
    "transfer_to_human_agents",
    "update_reservation_baggages",
    "update_reservation_flights",
    "update_reservation_passengers",
)
TAU_RETAIL_TOOLS = (
    "calculate",
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_order_details",
    "get_product_details",
    "get_user_details",
    "list_all_product_types",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
    "think",
    "transfer_to_human_agents",
)


@dataclass(frozen=True)
class Sample:
    """One file of the layout: where it goes, where it comes from, and its SHA-256."""

    path: str  # relative to the destination folder
    repo: str
    commit: str
    source: str  # the path in the repository (a folder for the derived tool definitions)
    sha256: str
    derive: str = ""  # "": copied as is; else the name of the function in DERIVE that makes it


def _bfcl(name: str, sha: str, *, answer: bool = False) -> Sample:
    folder = f"{BFCL_DATA}/possible_answer" if answer else BFCL_DATA
    local = f"bfcl/{name}.possible_answer.json" if answer else f"bfcl/{name}.json"
    return Sample(local, *BFCL, f"{folder}/{name}.json", sha)


def _func_doc(name: str, sha: str) -> Sample:
    return Sample(f"bfcl/multi_turn_func_doc/{name}.json", *BFCL, f"{BFCL_DATA}/multi_turn_func_doc/{name}.json", sha)


def _bfcl_result(category: str, sha: str) -> Sample:
    """A model's BFCL result file (AIREV-Agent-0.8B, pull request 1319's commit)."""
    name = f"BFCL_v4_{category}_result.json"
    return Sample(
        f"bfcl/results/AIREV-Agent-0.8B/{name}",
        "ShishirPatil/gorilla",
        "41bbf803",
        f"berkeley-function-call-leaderboard/result/airev-ai/AIREV-Agent-0.8B/{name}",
        sha,
    )


def _toolbench(n: int, sha: str) -> Sample:
    return Sample(
        f"toolbench/G1_answer_{n}_ChatGPT_DFS_woFilter_w2.json",
        *TOOLBENCH,
        f"data_example/answer/G1_answer/{n}_ChatGPT_DFS_woFilter_w2.json",
        sha,
    )


SAMPLES = (
    Sample(
        "tau_bench_gpt-4o_airline_tasks00-24.json",
        *TAU,
        "historical_trajectories/gpt-4o-airline.json",
        "acbed025407be95c27581925d0b05c0853321d9248d6d1fac5de45d3b814457f",
        derive="tau_first_25_tasks",
    ),
    Sample(
        "tau_bench_tool_schemas_airline_retail.json",
        *TAU,
        "tau_bench/envs",
        "58553a5ebda4b7091953ca9ab53ea267ff303625b738abf66a99fd5d23ea7042",
        derive="tau_tool_schemas",
    ),
    _bfcl("BFCL_v4_simple_python", "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991"),
    _bfcl("BFCL_v4_simple_python", "90cd5bc653690ee8e459b5b3f3fc9458606f7f3fcbf795bb51b7dc581f8c86dc", answer=True),
    _bfcl("BFCL_v4_parallel_multiple", "8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579"),
    _bfcl("BFCL_v4_parallel_multiple", "5ebf24f458c1f16300c05505d83d6f0a1b68b79be273a033febd0d4f840507e3", answer=True),
    _bfcl("BFCL_v4_irrelevance", "2b6ed4c2e992cdcf5f1678a701851f944bef7550ee026ed1ddb89efed5be01a6"),
    _bfcl("BFCL_v4_multi_turn_base", "1a21a995d06fd6f20ba55de7bced30ef953ec35e998f502ec2ecf4d66ef1c43a"),
    _bfcl("BFCL_v4_multi_turn_base", "1fee67823b317571649177dd89d63969feaae4e810cc7448ee55ba797fb7c8fc", answer=True),
    _func_doc("gorilla_file_system", "c4c1b741c71e2a17c97a5dc9c4a91d89978c4eaece56494d14272d5df6c650e9"),
    _func_doc("math_api", "83fa31708c89442bdcf12ac4dfbe3be8663ec9183a1b1524a9fda98164bc7e0b"),
    _func_doc("memory_kv", "96480cd9cbd3d4a34cd8f78879bc6622731768a26e080f7a34782e36e3402287"),
    _func_doc("memory_rec_sum", "4ceff946df00983c7f0b95d1b70ae402247f3312fb898bac9ecfa1de52f5a783"),
    _func_doc("memory_vector", "917908ca99fdd01e203274b7ec6eb2347fa91d57f3c6341e20945cc9c9d746cf"),
    _func_doc("message_api", "4d58ea933a5d2b280d7a52366617fb47fecd333d7b0e08e724db6fa12fb5f847"),
    _func_doc("posting_api", "87f9fc404a06e4107d7c366f1399c596440e84c16cb119faf374b2f532d86e8b"),
    _func_doc("ticket_api", "31324e0380782664fe82ba05bd23517808ad55692b45a5fe7c3d4d395fe4f0f8"),
    _func_doc("trading_bot", "1a7933fd8f0cb8fbec38aeae05cb8c24132747cad4904fe1c13ac3d01fc22c2d"),
    _func_doc("travel_booking", "f17b950c13adddf41d0848077df58788252e4c2e7cad5cfa71c8c4bf04f57b26"),
    _func_doc("vehicle_control", "0c8a66292844874ef7b168f343bc394d8615d2d9e1f4387999a9ee23011eac78"),
    _func_doc("web_search", "61fcee411e35f7ff67415e18cd67276615cf06e1c8841a683d2d997dbb46eac5"),
    _bfcl_result("simple_python", "2c920c665643086f538e7da80da1f369953b9ded2d3f9215b70cf85d4960779f"),
    _bfcl_result("parallel_multiple", "8bc5dd96f488d57295a75f3fe591ed564880d8e2e4db0fdd131c5c8a3c4c9ef1"),
    _bfcl_result("irrelevance", "da51dd6e31a3ec1316eeaba0bca3fe6c656a5d47fafe0450c018618a8fa3e97d"),
    _bfcl_result("multi_turn_base", "7133a21e2b562ed06afdcc88df24e090892703a78ffd511a07cff9406687dcd6"),
    _toolbench(10, "76a77721640045e07142c669008611e6b82b25007c73427aec771adbf9dd9841"),
    _toolbench(11, "3f935fe99b99beccb727763e8407ab9fdb5f2cf45d85d998327b669ab2ea52ab"),
    _toolbench(57, "8279c9999dad881db8bc9e112feeb51ca2861e89d835111408f218af297af531"),
    _toolbench(59, "8fea509e1be896331fdfd587ab4668281ee820f89cdb9a1760c218ed7804c2be"),
    _toolbench(69, "4c3baf49df02b567b7fbc09f4e1b8238dfc7a0cc3ba3ed6110eb38ea0ed9ccd0"),
    Sample(
        "toolbench/instruction_G1_query.json",
        *TOOLBENCH,
        "data_example/instruction/G1_query.json",
        "844bbec415dae93a40df3649bd8b46d7dc1417895e403ec74d189078da7a5c4e",
    ),
    Sample(
        "tau2/gpt-4o_telecom_pr17.json",
        "sierra-research/tau2-bench",
        "8d9b5076",  # pull request 17's commit
        "data/simulations/2025-08-10T02:44:06.496849_telecom_llm_agent_gpt-4o_user_simulator_gpt-4o.json",
        "cc7c895e289bfd2adac0cafa3356c4d6c1f441d57b6b1f5612cbb4ed6e3995cd",
    ),
    Sample(
        "tau2/claude-sonnet-4-6_airline_ironforge.json",
        "sierra-research/tau2-bench",
        "17044a0b",
        "web/leaderboard/public/submissions/ironshell-ironforge_ironshell-ui_2026-03-09/trajectories/"
        "ironshell_ironforge_v2_sonnet46.json",
        "db172bbdfc58ab82aaaf11e5372188948e00a37417580c28d8bda71d0b83b5e4",
    ),
    Sample(
        "tau2/toolorchestra_retail_gpt-4.1-mini.json",
        "sierra-research/tau2-bench",
        "17044a0b",
        "web/leaderboard/public/submissions/toolorchestra_nvidia_2025-12-02/trajectories/"
        "toolorchestra_retail_gpt-5_1trial.json",
        "7d1fad69087aec303ab82601f97d7803dd0b4f97b2fd9756243150008d67c014",
    ),
    Sample(
        "inspect/inspect_ai_browser_gpt-4o-mini.json",
        "UKGovernmentBEIS/inspect_ai",
        "499e6152",
        "tests/analysis/test_logs/2025-05-12T20-27-36-04-00_browser.json",
        "e19b39ad6bf6358cd79ab3b71495b27cafde6835df72648b2988ef0af326d327",
    ),
    Sample(
        "inspect/inspect-action_oxdna_claude-opus-4-1.eval",
        "METR/inspect-action",
        "564a080f",
        "tests/core/importer/data_fixtures/eval_logs/small.eval",
        "36c47ec0f038602f26fa6147082066c063d45e029952b9f596e5790b5af6736b",
    ),
)


def url(repo: str, commit: str, path: str) -> str:
    """A file of a repository at a commit (GitHub resolves an abbreviated commit id)."""
    return f"https://github.com/{repo}/raw/{commit}/{path}"


def download(repo: str, commit: str, path: str) -> bytes:
    request = urllib.request.Request(url(repo, commit, path), headers={"User-Agent": "toollens-fetch-test-data"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        body: bytes = answer.read()
    return body


def tau_first_25_tasks(sample: Sample) -> bytes:
    """tau-bench's gpt-4o airline runs of tasks 0 to 24, records unchanged, in their order."""
    records = json.loads(download(sample.repo, sample.commit, sample.source))
    return json.dumps([r for r in records if r["task_id"] <= 24]).encode()


def tau_tool_schemas(sample: Sample) -> bytes:
    """``{domain: [tool definitions]}``: what each tool's ``get_info()`` returns, a dict literal read
    from its source with ``ast.literal_eval`` (the source is never run)."""
    out: dict[str, list[object]] = {}
    for domain, names in (("airline", TAU_AIRLINE_TOOLS), ("retail", TAU_RETAIL_TOOLS)):
        out[domain] = [
            _get_info(download(sample.repo, sample.commit, f"{sample.source}/{domain}/tools/{name}.py"))
            for name in names
        ]
    return json.dumps(out, indent=1).encode()


def _get_info(source: bytes) -> object:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_info":
            for statement in ast.walk(node):
                if isinstance(statement, ast.Return) and statement.value is not None:
                    return ast.literal_eval(statement.value)
    raise ValueError("no get_info() returning a literal")


DERIVE: dict[str, Callable[[Sample], bytes]] = {
    "tau_first_25_tasks": tau_first_25_tasks,
    "tau_tool_schemas": tau_tool_schemas,
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(dest: Path) -> list[str]:
    """What in ``dest`` is missing or differs from the list (empty: the layout is complete)."""
    problems = []
    for sample in SAMPLES:
        path = dest / sample.path
        if not path.is_file():
            problems.append(f"{sample.path}: missing")
        elif sha256(path.read_bytes()) != sample.sha256:
            problems.append(f"{sample.path}: differs from {sample.repo}@{sample.commit} ({sample.source})")
    return problems


def fetch(dest: Path) -> list[str]:
    problems = []
    for sample in SAMPLES:
        path = dest / sample.path
        if path.is_file() and sha256(path.read_bytes()) == sample.sha256:
            continue
        try:
            data = (
                DERIVE[sample.derive](sample) if sample.derive else download(sample.repo, sample.commit, sample.source)
            )
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{sample.path}: cannot fetch {url(sample.repo, sample.commit, sample.source)}: {exc}")
            continue
        if sha256(data) != sample.sha256:
            problems.append(f"{sample.path}: fetched, but its SHA-256 is {sha256(data)}, not {sample.sha256}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        partial.write_bytes(data)
        partial.replace(path)
        print(f"{sample.path}  <- {sample.repo}@{sample.commit}", file=sys.stderr)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the data folder (the tests read ../shared/data or TOOLLENS_TEST_DATA)")
    parser.add_argument("--check", action="store_true", help="compare the folder with the list, fetch nothing")
    args = parser.parse_args(argv)
    problems = check(args.dest) if args.check else fetch(args.dest)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"{len(SAMPLES)} files in {args.dest}, as listed", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
