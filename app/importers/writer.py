"""Writing a conversion as files: ``DIR/suite.yaml`` (and ``suite-2.yaml``…
for BFCL's further suites) and ``DIR/trajectories.jsonl``, which ``toollens
score`` and ``toollens import`` read.

Files are written beside their final names and renamed at the end: a source
with bad records leaves nothing behind, unless told to skip them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from app.core.errors import InvalidTrajectory
from app.importers.base import Conversion

SUITE = "suite.yaml"
TRAJECTORIES = "trajectories.jsonl"


@dataclass
class Written:
    suites: list[Path]
    trajectories: Path
    records: int = 0
    calls: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)


def _dump_line(data: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(data) + b"\n"
    except TypeError:  # integers beyond 64 bits
        return (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")


SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: about 5 times faster, same documents


def _yaml(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=SAFE_DUMPER, allow_unicode=True, sort_keys=False, width=120)


def write_conversion(conversion: Conversion, out: Path, *, skip_bad: bool = False, source: str = "") -> Written:
    """Write the suite(s) and the records; raises InvalidTrajectory listing
    the bad lines (nothing written) unless ``skip_bad``."""
    out.mkdir(parents=True, exist_ok=True)
    suites = [conversion.suite, *conversion.extra_suites]
    names = [SUITE] + [f"suite-{i}.yaml" for i in range(2, len(suites) + 1)]
    tmp_traj = out / f".{TRAJECTORIES}.part"
    written = Written(suites=[out / n for n in names], trajectories=out / TRAJECTORIES)
    bad: list[tuple[int, str]] = []
    try:
        with tmp_traj.open("wb") as fh:
            for line, item in conversion.records():
                if isinstance(item, InvalidTrajectory):
                    bad.append((line, f"{item.field}: {item.detail}" if item.field else item.detail))
                    continue
                fh.write(_dump_line(item.to_dict()))
                written.records += 1
                written.calls += len(item.calls)
        if bad and not skip_bad:
            shown = "; ".join(f"line {n}: {m}" for n, m in bad[:10])
            more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
            raise InvalidTrajectory(
                f"{len(bad)} bad records, nothing written (--skip-bad writes the rest): {shown}{more}", source=source
            )
        for doc, path in zip(suites, written.suites, strict=True):
            part = path.with_name(f".{path.name}.part")
            part.write_text(_yaml(doc), encoding="utf-8")
            os.replace(part, path)
        os.replace(tmp_traj, written.trajectories)
    finally:
        tmp_traj.unlink(missing_ok=True)
    written.skipped = bad
    return written
