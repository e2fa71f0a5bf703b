"""Which modules of the core run compiled (mypyc, see ``setup.py``), and the switch back to source.

``TOOLLENS_PURE_PYTHON=1`` at run time makes the core import its ``.py``
sources even where compiled modules lie beside them (to debug or profile the
scoring path, or to check that both score alike); at install time it skips
the compilation.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

CORE_DIR = Path(__file__).resolve().parent
PACKAGE = "app.core"


def pure_python_requested() -> bool:
    """True when ``TOOLLENS_PURE_PYTHON`` is set to anything but empty or ``0``."""
    return os.environ.get("TOOLLENS_PURE_PYTHON", "").strip() not in ("", "0")


def _extensions() -> dict[str, Path]:
    """Module name → compiled file, for every core module that has one beside its source."""
    found: dict[str, Path] = {}
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for path in CORE_DIR.glob(f"*{suffix}"):
            stem = path.name[: -len(suffix)]
            if (CORE_DIR / f"{stem}.py").exists():
                found[stem] = path
    return found


def compiled_modules() -> list[str]:
    """The core modules this process runs compiled, sorted (empty when pure Python)."""
    names = []
    for stem in _extensions():
        module = sys.modules.get(f"{PACKAGE}.{stem}")
        spec = module.__spec__ if module is not None else importlib.util.find_spec(f"{PACKAGE}.{stem}")
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            names.append(stem)
    return sorted(names)


def stale_modules() -> list[str]:
    """Core modules whose source changed after they were compiled: the compiled one would run."""
    stale = []
    for stem, ext in _extensions().items():
        if (CORE_DIR / f"{stem}.py").stat().st_mtime > ext.stat().st_mtime:
            stale.append(stem)
    return sorted(stale)


def describe() -> str:
    """One line for reports and benchmark headers."""
    names = compiled_modules()
    if not names:
        return "scoring: pure Python"
    return f"scoring: compiled with mypyc ({len(names)} modules)"


class _SourceFirst:
    """A meta-path finder that loads core modules from their ``.py`` even when compiled ones exist."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, stem = fullname.rpartition(".")
        source = CORE_DIR / f"{stem}.py"
        if package != PACKAGE or not source.exists():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def prefer_sources() -> None:
    """Make every later import of a core module load its source (idempotent)."""
    if not any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())


if pure_python_requested():
    prefer_sources()
