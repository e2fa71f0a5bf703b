"""OTLP receiver benchmark: the tau-bench sample x N as GenAI spans, sent by
the real OpenTelemetry SDK (BatchSpanProcessor + OTLP/HTTP protobuf exporter)
as fast as it goes, to ``toollens serve`` in another process.

Reports spans/s (accepted by the receiver, and stored end to end) and checks
that every span was stored: one trajectory per trace, one call per
``execute_tool`` span, the tool errors, and the receiver's own count.

``--memory`` measures instead what the server keeps after a burst: its resident
memory (``/proc``, the web process and its worker processes) idle, at the
burst's peak, and ``--after`` seconds after each of ``--bursts`` bursts was
stored (the receiver-only burst: ``--copies`` x 100 conversations).

    .venv/bin/python bench/otlp_bench.py [--copies 20] [--db URL]
    .venv/bin/python bench/otlp_bench.py --memory [--bursts 2] [--after 60]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / os.environ.get("TOOLLENS_TEST_DATA", "../shared/data")).resolve()  # as tests/resources.py
TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import hostref  # noqa: E402

TARGET = 20_000  # spans/s stored (issue #6)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=20, help="how many times the 100 runs are sent")
    ap.add_argument("--db", default="", help="database URL (default: a fresh SQLite file)")
    ap.add_argument("--batch", type=int, default=512, help="the exporter's max_export_batch_size")
    ap.add_argument("--senders", type=int, default=2, help="concurrent clients in the receiver-only phase")
    ap.add_argument(
        "--exporters", type=int, default=2, help="processes exporting through the SDK in the last phase (0: skip it)"
    )
    ap.add_argument("--memory", action="store_true", help="measure the memory kept after bursts, nothing else")
    ap.add_argument("--bursts", type=int, default=2, help="bursts in the --memory phase")
    ap.add_argument("--after", type=float, default=60.0, help="seconds after a burst when --memory reads RSS")
    args = ap.parse_args()

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from app.importers import Options, convert
    from app.importers.otel_replay import replay_openai_messages

    tmp = Path(tempfile.mkdtemp(prefix="otlp-bench-"))
    ok = False
    db = args.db or f"sqlite:///{tmp / 'bench.db'}"
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "app.entry", "serve", "--port", str(port), "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "serve.log", "w"),  # noqa: SIM115
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                httpx.get(f"{base}/api/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        for _ in range(300):  # `toollens serve` starts its scoring worker: a server is measured ready, as it runs
            if httpx.get(f"{base}/v1/traces/status", timeout=5).json().get("worker_ready") is not False:
                break
            time.sleep(0.05)
        suite = convert("tau-bench", TAU, Options(tools=SCHEMAS)).suite
        if args.memory:
            ok = memory_phase(base, server.pid, suite, json.loads(TAU.read_text()), args)
            return
        run = httpx.post(f"{base}/api/runs", json={"name": "otlp-bench", "suite": suite, "model": "gpt-4o"}, timeout=30)
        run.raise_for_status()
        runs = json.loads(TAU.read_text())
        expected_calls = sum(len(m.get("tool_calls") or []) for r in runs for m in r["traj"]) * args.copies
        expected_errors = (
            sum(1 for r in runs for m in r["traj"] if m["role"] == "tool" and str(m["content"]).startswith("Error:"))
            * args.copies
        )

        provider = TracerProvider(resource=Resource.create({"service.name": "tau-bench-replay"}))
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces?run=otlp-bench", timeout=30)
        # a queue that holds the whole burst: the SDK's own default (2048) drops spans
        # in the client before any server sees them
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter, max_queue_size=65_536, max_export_batch_size=args.batch, schedule_delay_millis=200
            )
        )
        tracer = provider.get_tracer("bench")
        clock = [1_700_000_000_000_000_000]
        spans = 0
        t0 = time.perf_counter()
        for copy in range(args.copies):
            for r in runs:
                spans += replay_openai_messages(
                    tracer,
                    r["traj"],
                    clock=clock,
                    attributes={
                        "toollens.case_id": f"task-{r['task_id']}",
                        "toollens.trial": copy * 4 + r["trial"],
                        "toollens.reward": r["reward"],
                    },
                )
        t_made = time.perf_counter()
        provider.force_flush(timeout_millis=300_000)
        t_sent = time.perf_counter()
        status: dict[str, int] = {}
        while time.perf_counter() - t_sent < 300:
            status = httpx.get(f"{base}/v1/traces/status", timeout=30).json()
            if status["stored_spans"] >= spans or (status["buffered_spans"] == 0 and status["accepted_spans"] >= spans):
                break
            time.sleep(0.05)
        t_stored = time.perf_counter()
        provider.shutdown()
        figures = httpx.get(f"{base}/api/runs/{run.json()['id']}/figures", params={"cases_limit": 1}, timeout=60).json()
        receiver = receiver_only(base, suite, runs, args.copies, args.batch, args.senders)
        exporters = (
            exporters_phase(base, suite, runs, args.copies, args.batch, args.exporters, server.pid)
            if args.exporters
            else None
        )
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.memory:
        sys.exit(0 if ok else 1)
    calls = figures["hallucinated_tools"]["den"]
    errors = sum(c["count"] for c in figures["reactions"])
    print(hostref.line())
    print(f"spans made by the SDK: {spans} ({args.copies} x {len(runs)} runs) in {t_made - t0:.2f} s")
    print(
        f"exported and accepted: {status['accepted_spans']} spans in {t_sent - t0:.2f} s "
        f"= {status['accepted_spans'] / (t_sent - t0):,.0f} spans/s (refused with 503: "
        f"{status['refused_requests']} requests)"
    )
    print(
        f"stored end to end:     {status['stored_spans']} spans in {t_stored - t0:.2f} s "
        f"= {status['stored_spans'] / (t_stored - t0):,.0f} spans/s"
    )
    print(
        f"trajectories stored: {figures['trajectories']} (expected {len(runs) * args.copies}); calls {calls} "
        f"(expected {expected_calls}); tool errors {errors} (expected {expected_errors}); "
        f"pass^1..4 {[figures['pass_hat_k'].get(str(k)) for k in range(1, 5)]}"
    )
    ok = (
        status["stored_spans"] == spans
        and figures["trajectories"] == len(runs) * args.copies
        and calls == expected_calls
        and errors == expected_errors
    )
    print("every span stored" if ok else "MISSING SPANS")
    rate = receiver["spans"] / receiver["stored_s"]
    print(
        f"receiver only ({args.senders} clients posting the same spans, pre-encoded by the SDK's encoder, "
        f"{args.batch} per request): {receiver['spans']} spans accepted in {receiver['accepted_s']:.2f} s = "
        f"{receiver['spans'] / receiver['accepted_s']:,.0f} spans/s; all stored after {receiver['stored_s']:.2f} s "
        f"= {rate:,.0f} spans/s; stored {receiver['stored']} "
        f"({'every span' if receiver['stored'] == receiver['spans'] else 'MISSING SPANS'}), "
        f"503 answers {receiver['refused']}"
    )
    ok = ok and receiver["stored"] == receiver["spans"]
    met = receiver["stored"] == receiver["spans"] and rate >= TARGET
    print(
        f"target (the receiver stores every span, at {TARGET:,} spans/s or more): "
        f"{'met' if met else 'NOT met'} ({rate:,.0f} spans/s)"
    )
    if exporters is not None:
        n = exporters["spans"]
        print(
            f"SDK exporters in {args.exporters} processes (spans made beforehand, fed to each one's "
            f"BatchSpanProcessor + OTLPSpanExporter as fast as it goes): {n} spans accepted in "
            f"{exporters['accepted_s']:.2f} s = {n / exporters['accepted_s']:,.0f} spans/s; all stored after "
            f"{exporters['stored_s']:.2f} s = {n / exporters['stored_s']:,.0f} spans/s (of which "
            f"{exporters['stored_by_accept']} stored when the last was accepted); stored {exporters['stored']} "
            f"({'every span' if exporters['stored'] == n else 'MISSING SPANS'}), "
            f"503 answers {exporters['refused']}; CPU s: exporters {exporters['client_cpu']:.2f}, "
            f"receiver {exporters['server_cpu']:.2f} (web process {exporters['web_cpu']:.2f})"
        )
        ok = ok and exporters["stored"] == n
    print(f"database: {db.split('?')[0] if args.db else 'SQLite, a fresh file'}; pid {os.getpid()}")
    sys.exit(0 if ok else 1)


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def memory_phase(
    base: str, pid: int, suite: dict[str, object], runs: list[dict[str, object]], args: argparse.Namespace
) -> bool:
    """RSS of the server (web process; its worker processes apart) idle, at each burst's peak and
    ``args.after`` seconds after each burst was stored; True when the web process is then within
    20% of its idle size after every burst."""
    import threading

    time.sleep(3.0)  # started and settled
    idle, idle_workers = rss_mb(pid), sum(rss_mb(c) for c in _children(pid))
    print(hostref.line())
    print(f"idle: web process {idle:.0f} MB, worker processes {idle_workers:.0f} MB")
    peak = [0.0, 0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss_mb(pid))
            peak[1] = max(peak[1], sum(rss_mb(c) for c in _children(pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ok = True
    try:
        for n in range(1, args.bursts + 1):
            peak[:] = [0.0, 0.0]
            got = receiver_only(base, suite, runs, args.copies, args.batch, args.senders, run=f"otlp-bench-memory-{n}")
            stored_peak = list(peak)
            time.sleep(args.after)
            web, workers = rss_mb(pid), sum(rss_mb(c) for c in _children(pid))
            within = web <= 1.2 * idle
            ok = ok and within and got["stored"] == got["spans"]
            print(
                f"burst {n}: {got['spans']} spans stored in {got['stored_s']:.1f} s "
                f"({'every span' if got['stored'] == got['spans'] else 'MISSING SPANS'}); peak: web "
                f"{stored_peak[0]:.0f} MB, workers {stored_peak[1]:.0f} MB; {args.after:.0f} s after: "
                f"web {web:.0f} MB "
                f"({100 * (web / idle - 1):+.0f}% of idle: {'within' if within else 'NOT within'} 20%), "
                f"workers {workers:.0f} MB ({100 * (workers / idle_workers - 1):+.0f}%)"
            )
    finally:
        stop.set()
        sampler.join()
    return ok


def finished_spans(runs: list[dict[str, object]], copies: int) -> list[Any]:
    """The sample's conversations replayed ``copies`` times as GenAI spans by the SDK, kept in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.importers.otel_replay import replay_openai_messages

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    clock = [1_700_000_000_000_000_000]
    for copy in range(copies):
        for r in runs:
            replay_openai_messages(
                tracer,
                r["traj"],
                clock=clock,
                attributes={  # type: ignore[arg-type]
                    "toollens.case_id": f"task-{r['task_id']}",
                    "toollens.trial": copy * 4 + int(r["trial"]),  # type: ignore[call-overload]
                    "toollens.reward": r["reward"],
                },
            )  # type: ignore[dict-item]
    return list(memory.get_finished_spans())


def split_by_trace(spans: list[Any], parts: int) -> list[list[Any]]:
    """``parts`` shares with each trace whole in one of them, spans in the order they ended."""
    shares: list[list[Any]] = [[] for _ in range(parts)]
    owner: dict[int, int] = {}
    for sp in spans:
        shares[owner.setdefault(sp.context.trace_id, len(owner) % parts)].append(sp)
    return shares


def receiver_only(
    base: str,
    suite: dict[str, object],
    runs: list[dict[str, object]],
    copies: int,
    batch: int,
    senders: int,
    run: str = "otlp-bench-receiver",
) -> dict[str, float]:
    """The receiver's own capacity: export requests encoded beforehand (with the
    SDK's encoder, as its exporter sends them), posted by concurrent clients."""
    from concurrent.futures import ThreadPoolExecutor

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    httpx.post(f"{base}/api/runs", json={"name": run, "suite": suite}, timeout=30).raise_for_status()
    spans = finished_spans(runs, copies)
    # each client sends its own traces, in the order their spans ended (as one exporter per process does);
    # interleaving one trace's spans across clients would make the receiver see them out of order
    by_sender = split_by_trace(spans, senders)
    chunks = [
        [encode_spans(mine[i : i + batch]).SerializeToString() for i in range(0, len(mine), batch)]
        for mine in by_sender
    ]
    before = httpx.get(f"{base}/v1/traces/status", timeout=30).json()
    refused = 0

    def send(chunk: list[bytes]) -> int:
        n = 0
        with httpx.Client(timeout=60) as client:
            for body in chunk:
                while True:
                    r = client.post(
                        f"{base}/v1/traces?run={run}", content=body, headers={"content-type": "application/x-protobuf"}
                    )
                    if r.status_code != 503:
                        r.raise_for_status()
                        break
                    n += 1
                    time.sleep(float(r.headers.get("retry-after", "1")))
        return n

    t0 = time.monotonic()
    with ThreadPoolExecutor(senders) as pool:
        refused = sum(pool.map(send, chunks))
    accepted_s = time.monotonic() - t0
    status = wait_stored(base, before, len(spans), t0, poll=0.05)
    return {
        "spans": len(spans),
        "accepted_s": accepted_s,
        "stored_s": time.monotonic() - t0,
        "stored": status["stored_spans"] - before["stored_spans"],
        "refused": refused,
    }


def wait_stored(base: str, before: dict[str, int], n: int, t0: float, poll: float) -> dict[str, int]:
    """Poll the receiver's status until ``n`` spans more than ``before`` are stored (at most
    300 s after ``t0``, a ``time.monotonic()``); returns the last status read."""
    status = before
    while time.monotonic() - t0 < 300:
        status = httpx.get(f"{base}/v1/traces/status", timeout=30).json()
        if status["stored_spans"] - before["stored_spans"] >= n:
            break
        time.sleep(poll)
    return status


def _cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of a process and each of its descendants, from /proc."""
    out: dict[int, float] = {}
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for child in children:
        out.update(_cpu_seconds(int(child)))
    return out


def _export_in_child(spans: list[object], endpoint: str, batch: int, go: object, results: object) -> None:
    """One exporting process: the SDK's BatchSpanProcessor and OTLP/HTTP exporter, fed finished spans."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    processor = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint, timeout=30),
        max_queue_size=65_536,
        max_export_batch_size=batch,
        schedule_delay_millis=200,
    )
    go.wait()  # type: ignore[attr-defined]
    cpu = time.process_time()
    for span in spans:
        processor.on_end(span)  # type: ignore[arg-type]
    processor.force_flush(timeout_millis=300_000)
    results.put((time.monotonic(), time.process_time() - cpu))  # type: ignore[attr-defined]
    processor.shutdown()


def exporters_phase(
    base: str,
    suite: dict[str, object],
    runs: list[dict[str, object]],
    copies: int,
    batch: int,
    processes: int,
    server_pid: int,
) -> dict[str, float]:
    """The real SDK export path from several processes at once, as several instrumented
    services send to one collector: the spans are made beforehand (making them is the
    application's work, and in one process it caps the rate at what the first phase shows),
    then each process feeds its share of traces to its own BatchSpanProcessor and OTLP/HTTP
    exporter, which batch, encode and post them, retrying what is refused."""
    import multiprocessing as mp

    httpx.post(f"{base}/api/runs", json={"name": "otlp-bench-exporters", "suite": suite}, timeout=30).raise_for_status()
    spans = finished_spans(runs, copies)
    shares = split_by_trace(spans, processes)
    context = mp.get_context("fork")  # the children inherit the spans: nothing to pickle
    go, results = context.Event(), context.Queue()
    children = [
        context.Process(
            target=_export_in_child, args=(share, f"{base}/v1/traces?run=otlp-bench-exporters", batch, go, results)
        )
        for share in shares
    ]
    for child in children:
        child.start()
    time.sleep(1.0)  # every exporter built and waiting
    before = httpx.get(f"{base}/v1/traces/status", timeout=30).json()
    cpu_before = _cpu_seconds(server_pid)
    t0 = time.monotonic()
    go.set()
    done = [results.get(timeout=300) for _ in children]
    accepted_at = max(t for t, _ in done)
    stored_by_accept = httpx.get(f"{base}/v1/traces/status", timeout=30).json()["stored_spans"] - before["stored_spans"]
    status = wait_stored(base, before, len(spans), t0, poll=0.02)
    stored_s = time.monotonic() - t0
    cpu_after = _cpu_seconds(server_pid)
    for child in children:
        child.join(timeout=60)
    return {
        "spans": len(spans),
        "accepted_s": accepted_at - t0,
        "stored_s": stored_s,
        "stored": status["stored_spans"] - before["stored_spans"],
        "stored_by_accept": stored_by_accept,
        "refused": status["refused_requests"] - before["refused_requests"],
        "client_cpu": sum(c for _, c in done),
        "server_cpu": sum(cpu_after.get(pid, 0.0) - before_s for pid, before_s in cpu_before.items()),
        "web_cpu": cpu_after.get(server_pid, 0.0) - cpu_before.get(server_pid, 0.0),
    }


if __name__ == "__main__":
    main()
