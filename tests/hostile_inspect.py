"""Hostile Inspect logs of issue 46, built on the fly (never committed): a
small archive whose one attachment is referenced hundreds of times, an
archive of a few hundred KB whose one member inflates to a quarter of a
gigabyte of tiny JSON values, and many-sample logs as ``.json`` and ``.eval``.
Used by tests/importers/test_inspect_bounds.py (small sizes) and
bench/hostile_imports.py (the issue's sizes)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HEADER = {
    "version": 2,
    "status": "success",
    "eval": {
        "task": "hostile",
        "model": "mockllm/model",
        "created": "2025-01-01T00:00:00",
        "dataset": {"samples": 1, "sample_ids": ["s"]},
        "config": {"epochs": 1},
    },
    "plan": {"steps": []},
    "results": {},
    "stats": {},
}


def write_zip(path: Path, members: dict[str, Callable[[], Iterable[bytes]]]) -> Path:
    """A deflated zip archive whose members are streams of chunks (read twice:
    once for the checksum and size, once to compress): a member of gigabytes
    costs a chunk of memory here."""
    local, central = bytearray(), bytearray()
    for name, chunks in members.items():
        crc, size = 0, 0
        for chunk in chunks():
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        packed = b"".join(c.compress(chunk) for chunk in chunks()) + c.flush()
        raw = name.encode()
        offset = len(local)
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(packed), size, len(raw), 0)
        local += raw + packed
        central += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                20,
                20,
                0,
                8,
                0,
                0,
                crc,
                len(packed),
                size,
                len(raw),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + raw
        )
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    path.write_bytes(bytes(local + central + end))
    return path


def once(data: bytes) -> Callable[[], Iterable[bytes]]:
    return lambda: [data]


def sample(sid: str, *, refs: int = 0, attachment: str = "", pad: int = 0) -> dict[str, Any]:
    """One sample: a question, then ``max(refs, 1)`` calls whose results are
    ``attachment://big`` (``refs`` of them) or a short text; ``pad``
    characters of metadata (read, never kept)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"question {sid}"}]
    for i in range(max(refs, 1)):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"c{i}", "function": "bash", "arguments": {"cmd": "cat big"}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "attachment://big" if refs else "ok"})
    return {
        "id": sid,
        "epoch": 1,
        "input": f"question {sid}",
        "target": "42",
        "messages": messages,
        "output": {"completion": "42"},
        "scores": {"match": {"value": "C"}},
        "attachments": {"big": attachment} if refs else {},
        "metadata": {"pad": "x" * pad},
    }


def attachment_bomb(path: Path, *, refs: int = 600, size: int = 1 << 20, samples: int = 1) -> Path:
    """One attachment of ``size`` characters referenced ``refs`` times in each
    of ``samples`` samples (the issue's: 600 references to 1 MB, 4.5 KB of archive)."""
    ids = [f"s{i}" for i in range(samples)]
    head = {**HEADER, "eval": {**HEADER["eval"], "dataset": {"samples": samples, "sample_ids": ids}}}
    big = "y" * size
    members = {"header.json": once(json.dumps(head).encode())}
    for sid in ids:
        members[f"samples/{sid}_epoch_1.json"] = once(json.dumps(sample(sid, refs=refs, attachment=big)).encode())
    return write_zip(path, members)


def values_bomb(path: Path, *, mib: int = 250, item: bytes = b"{},") -> Path:
    """One sample member of ``mib`` MiB of ``[item item … ]`` (the issue's
    ``{},{},…``, or a 20-digit integer that leaves orjson), a few hundred KB of archive."""
    chunk = item * ((1 << 20) // len(item))
    count = (mib << 20) // len(chunk)

    def body() -> Iterable[bytes]:
        yield b'{"id": "s", "epoch": 1, "messages": [], "pad": ['
        for _ in range(count):
            yield chunk
        yield b"0]}"

    return write_zip(path, {"header.json": once(json.dumps(HEADER).encode()), "samples/s_epoch_1.json": body})


def many_samples(path: Path, n: int, *, pad: int = 0) -> Path:
    """A log of ``n`` samples, as ``.json`` (one document) or ``.eval`` (by the suffix)."""
    ids = [f"s{i}" for i in range(n)]
    head = {**HEADER, "eval": {**HEADER["eval"], "dataset": {"samples": n, "sample_ids": ids}}}
    if path.suffix == ".eval":  # zip64 past 65,535 members: the standard library's writer
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("header.json", json.dumps(head))
            for sid in ids:
                z.writestr(f"samples/{sid}_epoch_1.json", json.dumps(sample(sid, pad=pad)))
        return path
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps(head)[:-1] + ', "samples": [')
        for i, sid in enumerate(ids):
            fh.write(("," if i else "") + json.dumps(sample(sid, pad=pad)))
        fh.write("]}")
    return path


PEAK = (
    "import resource, sys\n"
    "from app.entry import main\n"
    "import app.cli, app.importers.inspect_log, app.store.importer\n"
    "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "sys.argv = ['toollens', *sys.argv[1:]]\n"
    "try:\n"
    "    code = main()\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "print(f'PEAK {base} {peak} {code}', file=sys.stderr)\n"
)


def peak_import(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, str]:
    """``toollens ARGS`` in a fresh process: (MiB resident after the imports,
    peak MiB, exit code, stderr without the figures)."""
    proc = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, env=env)
    lines = proc.stderr.strip().splitlines()
    mark = [line for line in lines if line.startswith("PEAK ")]
    if not mark:
        raise AssertionError(f"no figures: {proc.stderr[-2000:]}")
    _, base, peak, code = mark[-1].split()
    rest = "\n".join(line for line in lines if not line.startswith("PEAK "))
    return int(base) / 1024, int(peak) / 1024, int(code) if code.isdigit() else 1, rest
