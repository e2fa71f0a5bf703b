"""Import throughput per format (calls/s) and peak memory of a large
``openai-messages`` import.

Sources are made on the fly in a temporary folder (never in the repository)
from the tau-bench sample's real conversations: ``openai-messages`` (JSON
Lines, repeated with fresh ids up to ``--mb``), ``anthropic-messages`` (the
same conversations as tool_use / tool_result blocks), ``otel`` (OTLP JSON of
the replayed spans), ``toollens`` (SPEC §5 records), ``tau-bench`` (the
sample itself), ``tau2`` (one τ²-bench results file of the same
conversations, up to ``--mb``) and ``inspect`` (an Inspect ``.eval`` archive
of them, Zstandard-compressed, up to ``--mb`` of JSON; and a 5 MB one read
by the ``inspect_ai`` package's reader, for comparison). Each command runs in a fresh process; peak RSS is that
process's maximum resident set (``ru_maxrss``).

    .venv/bin/python bench/import_bench.py [--mb 200] [--db URL] [--only openai-messages]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
TOOLLENS = str(ROOT / ".venv" / "bin" / "toollens")
sys.path.insert(0, str(ROOT))


def to_anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for tc in m.get("tool_calls") or ():
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc["id"],
                        "name": tc["function"]["name"],
                        "input": json.loads(tc["function"]["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
                "is_error": str(m["content"]).startswith("Error:"),
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
    return out


def to_tau2(traj: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in traj:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            calls = [
                {
                    "id": tc["id"],
                    "name": tc["function"]["name"],
                    "requestor": "assistant",
                    "arguments": json.loads(tc["function"]["arguments"]),
                }
                for tc in m.get("tool_calls") or ()
            ]
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content"),
                    "tool_calls": calls or None,
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
                }
            )
        elif m["role"] == "tool":
            out.append(
                {
                    "id": m["tool_call_id"],
                    "role": "tool",
                    "content": m["content"],
                    "requestor": "assistant",
                    "error": str(m["content"]).startswith("Error:"),
                }
            )
    return out


def to_inspect(r: dict[str, Any], n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for m in r["traj"]:
        if m["role"] in ("system", "user"):
            messages.append({"role": m["role"], "content": m["content"]})
        elif m["role"] == "assistant":
            calls = [
                {
                    "id": tc["id"],
                    "function": tc["function"]["name"],
                    "type": "function",
                    "arguments": json.loads(tc["function"]["arguments"]),
                }
                for tc in m.get("tool_calls") or ()
            ]
            messages.append({"role": "assistant", "content": m.get("content") or "", "tool_calls": calls or None})
            events.append(
                {
                    "event": "model",
                    "model": "openai/gpt-4o",
                    "input": [],
                    "tools": [],
                    "config": {},
                    "tool_choice": "auto",
                    "output": {
                        "model": "gpt-4o",
                        "choices": [],
                        "time": 1.0,
                        "usage": {"input_tokens": 1000, "output_tokens": 50, "total_tokens": 1050},
                    },
                }
            )
        elif m["role"] == "tool":
            error = {"type": "unknown", "message": m["content"]} if str(m["content"]).startswith("Error:") else None
            messages.append(
                {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"], "error": error}
            )
    return {
        "id": f"task-{r['task_id']}-{n}",
        "epoch": r["trial"] + 1,
        "input": r["traj"][1]["content"],
        "target": "",
        "messages": messages,
        "output": {"model": "gpt-4o", "completion": "", "choices": []},
        "scores": {"match": {"value": "C" if r["reward"] == 1 else "I"}},
        "events": events,
        "attachments": {},
    }


def make_tau2_and_inspect(folder: Path, runs: list[dict[str, Any]], mb: int) -> tuple[Path, Path]:
    target = mb * 1024 * 1024
    sims, size, n = [], 0, 0
    while size < target:
        r = runs[n % len(runs)]
        sim = {
            "id": f"s{n}",
            "task_id": f"{r['task_id']}-{n // len(runs)}",
            "trial": r["trial"],
            "termination_reason": "user_stop",
            "reward_info": {"reward": r["reward"]},
            "messages": to_tau2(r["traj"]),
        }
        size += len(json.dumps(sim))
        sims.append(sim)
        n += 1
    tau2 = folder / "tau2.json"
    tau2.write_text(json.dumps({"info": {"agent_info": {"llm": "gpt-4o"}}, "tasks": [], "simulations": sims}))
    import zipfile

    import zipfile_zstd  # noqa: F401  (inspect_ai's dependency: lets zipfile write Zstandard)

    log = folder / "inspect.eval"
    ids: list[str] = []
    with zipfile.ZipFile(log, "w", compression=zipfile.ZIP_ZSTANDARD) as z:  # type: ignore[attr-defined]
        size, n = 0, 0
        while size < target:
            sample = to_inspect(runs[n % len(runs)], n // len(runs))
            data = json.dumps(sample)
            size += len(data)
            z.writestr(f"samples/{sample['id']}_epoch_{sample['epoch']}.json", data)
            ids.append(sample["id"])
            n += 1
        z.writestr(
            "header.json",
            json.dumps(
                {
                    "version": 2,
                    "status": "success",
                    "eval": {
                        "task": "bench",
                        "model": "openai/gpt-4o",
                        "created": "2025-01-01T00:00:00+00:00",
                        "dataset": {"samples": len(ids), "sample_ids": list(dict.fromkeys(ids))},
                        "config": {"epochs": 4},
                        "task_id": "t",
                        "run_id": "r",
                        "eval_id": "e",
                        "task_version": 0,
                        "model_args": {},
                        "packages": {"inspect_ai": "0.3.285"},
                    },
                    "plan": {"steps": []},
                    "results": None,
                    "stats": {"started_at": "", "completed_at": "", "model_usage": {}},
                }
            ),
        )
    return tau2, log


INSPECT_AI_READER = (
    "import sys\nfrom pathlib import Path\nfrom app.importers import Options\n"
    "from app.importers.inspect_log import convert\n"
    "from app.importers.writer import write_conversion\n"
    "c = convert(Path(sys.argv[1]), Options(), use_inspect_ai=True)\n"
    "w = write_conversion(c, Path(sys.argv[2]))\n"
    "print(f'wrote ({w.records} trajectories, {w.calls} calls)', file=sys.stderr)"
)


def make_sources(folder: Path, mb: int) -> dict[str, tuple[Path, list[str]]]:
    runs = json.loads(TAU.read_text())
    target = mb * 1024 * 1024
    big = folder / "openai.jsonl"
    n = 0
    with big.open("w") as fh:
        while fh.tell() < target:
            r = runs[n % len(runs)]
            fh.write(json.dumps({"id": f"conv-{n}", "messages": r["traj"], "reward": r["reward"]}) + "\n")
            n += 1
    small = folder / "anthropic.jsonl"
    with small.open("w") as fh:
        for i in range(50):
            for r in runs:
                fh.write(
                    json.dumps({"id": f"a-{i}-{r['task_id']}-{r['trial']}", "messages": to_anthropic(r["traj"])}) + "\n"
                )
    otel = folder / "otel.jsonl"
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.importers.otel_replay import replay_openai_messages

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(20):
        for r in runs:
            replay_openai_messages(
                tracer,
                r["traj"],
                attributes={"toollens.case_id": f"task-{r['task_id']}", "toollens.trial": i * 4 + r["trial"]},
            )
    spans = memory.get_finished_spans()
    with otel.open("w") as fh:
        for i in range(0, len(spans), 512):
            request = MessageToDict(encode_spans(spans[i : i + 512]))
            for rs in request.get("resourceSpans", []):  # OTLP/JSON writes ids as hex
                for ss in rs.get("scopeSpans", []):
                    for s in ss.get("spans", []):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in s:
                                import base64

                                s[key] = base64.b64decode(s[key]).hex()
            fh.write(json.dumps(request) + "\n")
    spec = folder / "spec"
    subprocess.run(
        [TOOLLENS, "convert", "--from", "anthropic-messages", str(small), "--tools", str(SCHEMAS), "--out", str(spec)],
        check=True,
        capture_output=True,
    )
    tools = ["--tools", str(SCHEMAS)]
    tau2, log = make_tau2_and_inspect(folder, runs, mb)
    small = folder / "small"
    small.mkdir()
    _, small_log = make_tau2_and_inspect(small, runs, 5)
    return {
        "tau2": (tau2, tools),
        "inspect": (log, tools),
        "inspect-inspect_ai": (small_log, tools),
        "openai-messages": (big, tools),
        "anthropic-messages": (small, tools),
        "otel": (otel, tools),
        "tau-bench": (TAU, tools),
        "toollens": (spec / "trajectories.jsonl", tools),
    }


MEASURE = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(use.ru_utime + use.ru_stime, use.ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)"
)


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the command's process, its stderr (its
    CPU seconds in ``CPU[cmd[-1]]``). A fresh wrapper process per command,
    so that the peak is this command's. On a shared machine the CPU seconds
    say more than the wall clock."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr}")
    lines = proc.stderr.strip().splitlines()
    cpu, rss = lines[-1].split()
    CPU[cmd[-1]] = float(cpu)
    return wall, int(rss) / 1024, "\n".join(lines[:-1])


CPU: dict[str, float] = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200, help="size of the generated openai-messages file")
    ap.add_argument("--db", default="", help="database URL (default: a fresh SQLite file per format)")
    ap.add_argument("--only", default="", help="one format only")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="import-bench-"))
    sources = make_sources(folder, args.mb)
    for fmt, (path, extra) in sources.items():
        if args.only and fmt != args.only:
            continue
        db = args.db or f"sqlite:///{folder / (fmt + '.db')}"
        size = path.stat().st_size / 1e6
        out = folder / f"out-{fmt}"
        if fmt == "inspect-inspect_ai":  # a 5 MB archive read by the inspect_ai package's reader
            wall_c, rss_c, err_c = timed([sys.executable, "-c", INSPECT_AI_READER, str(path), str(out)])
            calls = int(err_c.rsplit("trajectories, ", 1)[1].split(" calls")[0])
            print(
                f"{fmt:19s} {path.stat().st_size / 1e6:8.1f} MB  {calls:8d} calls | convert {wall_c:7.1f} s "
                f"{calls / wall_c:9,.0f} calls/s ({calls / CPU[str(out)]:,.0f} per CPU s) peak {rss_c:6.0f} MB"
            )
            continue
        wall_c, rss_c, err_c = timed([TOOLLENS, "convert", "--from", fmt, str(path), *extra, "--out", str(out)])
        calls = int(err_c.rsplit("trajectories, ", 1)[1].split(" calls")[0])
        wall_i, rss_i, err_i = timed([TOOLLENS, "import", str(path), "--format", fmt, *extra, "--run", fmt, "--db", db])
        stored = err_i.strip().splitlines()[-1]
        cpu_c, cpu_i = calls / CPU[str(out)], calls / CPU[db]
        print(
            f"{fmt:19s} {size:8.1f} MB  {calls:8d} calls | convert {wall_c:7.1f} s {calls / wall_c:9,.0f} calls/s "
            f"({cpu_c:,.0f} per CPU s) peak {rss_c:6.0f} MB | import {wall_i:7.1f} s {calls / wall_i:9,.0f} calls/s "
            f"({cpu_i:,.0f} per CPU s) peak {rss_i:6.0f} MB | {stored}"
        )
        if not args.db:
            os.unlink(folder / (fmt + ".db"))
        for p in out.glob("*"):
            p.unlink()
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
