"""Build hook: compile the scoring path to C with mypyc when this machine can.

ToolLens is pure Python and runs as such. When a C compiler and the Python
headers are present, ``pip install`` (editable or not) also compiles the
modules that every scored call goes through with mypyc, which scores about
1.4 times faster (``bench/score_bench.py``). The compiled modules behave
exactly as their source; the test suite runs against them.

``TOOLLENS_PURE_PYTHON=1`` skips the compilation. An editable install keeps
the ``.so`` files beside their sources: after editing one of ``COMPILED``,
rebuild (``make build``) or the old compiled module keeps running; ``make``
does it by itself and the test suite refuses a stale module.
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
    "app/core/alignment.py",
    "app/core/evaluate.py",
    "app/core/outcome.py",
    "app/core/records.py",
    "app/core/report.py",
    "app/core/schema.py",
    "app/core/scoring.py",
    "app/core/tolerance.py",
    "app/store/rows.py",  # a scored batch as rows: every stored call goes through it
]
# The shared runtime library lands inside the package (app/core/_native__mypyc*.so),
# so that an editable install finds it wherever it is run from.
GROUP = "app.core._native"


def _can_compile() -> tuple[bool, str]:
    if os.environ.get("TOOLLENS_PURE_PYTHON", "").strip() not in ("", "0"):
        return False, "TOOLLENS_PURE_PYTHON is set"
    if sys.implementation.name != "cpython":
        return False, f"{sys.implementation.name} is not CPython"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return False, f"no C compiler ({compiler})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return False, "no Python headers (Python.h)"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return False, "mypyc is not installed"
    return True, ""


def ext_modules() -> list[object]:
    ok, why = _can_compile()
    if not ok:
        print(f"toollens: scoring stays pure Python ({why})", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    # Only the listed modules are compiled; mypy reads their imports for types and
    # treats packages absent from the build environment (pydantic, yaml...) as Any.
    args = ["--config-file", "", "--ignore-missing-imports", "--follow-imports", "silent"]
    return list(mypycify(args + COMPILED, opt_level="3", group_name=GROUP))


setup(ext_modules=ext_modules())
