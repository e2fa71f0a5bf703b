"""Build hook: compile the scoring path to C with mypyc when this machine can.

ToolLens is pure Python and runs as such. Asked to (``TOOLLENS_COMPILE=1
pip install ...``, which ``make fast``, ``make build`` and ``make test`` do,
with mypy installed and ``--no-build-isolation``),
and when a C compiler and the Python headers are present, the install also
compiles the modules that every scored call goes through with mypyc, which
scores 1.4 to 2 times faster (``bench/score_bench.py``); it takes a few
minutes, so a plain install (``make demo``) leaves it out. The compiled modules compute what
their source computes (``tests/core/test_compiled.py`` compares the two), but they
enforce the declared types of their classes' fields and arguments at run time.

An install without ``TOOLLENS_COMPILE=1``, or with ``TOOLLENS_PURE_PYTHON=1``
(which wins), skips the compilation and removes compiled files an earlier
build left beside the sources; an extension that fails to build is
skipped, its module stays Python. An editable install keeps the ``.so`` files
beside their sources: after editing the core, rebuild (``make build``) or the
old compiled modules keep running; ``make`` does it by itself and the test
suite refuses a stale build.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup

# The scoring hot path: what `score_trajectories` runs for every record, and what stores it.
COMPILED = [
    "app/core/score/alignment.py",
    "app/core/score/blame.py",  # who failed a conversation: every failed conversation goes through it
    "app/core/score/divergence.py",  # a failed trajectory's first divergence
    "app/core/reports/evaluate.py",
    "app/core/score/grounding.py",  # the values an answer states, against what the tools said
    "app/core/language.py",  # the outcome's words
    "app/core/score/outcome.py",
    "app/core/records.py",
    "app/core/reports/report.py",
    "app/core/suites/schema.py",
    "app/core/score/scoring.py",
    "app/core/suites/tolerance.py",
    "app/core/score/turns.py",  # a conversation's figures per user turn
    "app/core/usage.py",  # each record's model calls, and their tally
    "app/store/rows.py",  # a scored batch as rows: every stored call goes through it
    "app/importers/otel.py",  # spans to records: every span the OTLP receiver stores
    "app/otlp/span.py",  # the span model: every span the receiver stages
    "app/otlp/spans.py",  # the span decoders: every span the receiver stages
    "app/otlp/wire.py",  # the receiver's protobuf bodies read into spans
]
# The shared runtime library lands inside the package (app/core/_native__mypyc*.so),
# so that an editable install finds it wherever it is run from.
GROUP = "app.core._native"


def _can_compile() -> tuple[bool, str]:
    if os.environ.get("TOOLLENS_PURE_PYTHON", "").strip() not in ("", "0"):
        return False, "TOOLLENS_PURE_PYTHON is set"
    if os.environ.get("TOOLLENS_COMPILE", "").strip() in ("", "0"):
        return False, "compiling is asked for with TOOLLENS_COMPILE=1: make fast"
    if sys.implementation.name != "cpython":
        return False, f"{sys.implementation.name} is not CPython"
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return False, f"no C compiler ({compiler})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return False, "no Python headers (Python.h)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return False, "mypyc is not installed"
    return True, ""


def _remove_old_builds() -> None:
    """Compiled files beside the sources would still be imported by an editable install."""
    for source in COMPILED:
        for old in Path(source).parent.glob(Path(source).stem + ".*.so"):
            print(f"toollens: removing {old} (an earlier compiled build)", file=sys.stderr)
            old.unlink()
    for old in Path(*GROUP.split(".")[:-1]).glob(GROUP.rsplit(".", 1)[1] + "__mypyc.*.so"):
        old.unlink()


def ext_modules() -> list[object]:
    ok, why = _can_compile()
    if not ok:
        print(f"toollens: scoring stays pure Python ({why})", file=sys.stderr)
        _remove_old_builds()
        return []
    from mypyc.build import mypycify

    # Only the listed modules are compiled; mypy reads their imports for types and
    # treats packages absent from the build environment (pydantic, yaml...) as Any.
    args = ["--config-file", "", "--ignore-missing-imports", "--follow-imports", "silent"]
    extensions = list(mypycify(args + COMPILED, opt_level="3", group_name=GROUP))
    for extension in extensions:
        extension.optional = True  # a compiler that fails leaves the module in Python
    return extensions


setup(ext_modules=ext_modules())
