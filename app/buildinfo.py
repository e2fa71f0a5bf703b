"""Which modules run compiled (mypyc, see ``setup.py``), and the switch back to source.

``TOOLLENS_PURE_PYTHON=1`` at run time makes ToolLens import its ``.py``
sources even where compiled modules lie beside them (to debug or profile the
scoring path, or to check that both score alike); at install time it skips
the compilation. ``app/__init__.py`` imports this module first, so the switch
holds before any compiled module could load.
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

APP_DIR = Path(__file__).resolve().parent
PACKAGES = (
    "app.core",
    "app.core.suites",
    "app.core.run",
    "app.core.score",
    "app.core.reports",
    "app.core.advise",
    "app.store",
    "app.importers",
    "app.otlp",
)  # where setup.py compiles modules


def pure_python_requested() -> bool:
    """True when ``TOOLLENS_PURE_PYTHON`` is set to anything but empty or ``0``."""
    return os.environ.get("TOOLLENS_PURE_PYTHON", "").strip() not in ("", "0")


def _source(module: str) -> Path:
    return APP_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")


def _extensions() -> dict[str, Path]:
    """Module name → compiled file, for every module that has one beside its source."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        folder = APP_DIR.parent.joinpath(*package.split("."))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            for path in folder.glob(f"*{suffix}"):
                module = f"{package}.{path.name[: -len(suffix)]}"
                if _source(module).exists():
                    found[module] = path
    return found


def compiled_modules() -> list[str]:
    """The modules this process runs compiled (``app.core.score.scoring``…), sorted; empty when pure Python."""
    names = []
    for name in _extensions():
        module = sys.modules.get(name)
        spec = module.__spec__ if module is not None else importlib.util.find_spec(name)
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            names.append(name)
    return sorted(names)


def stale_modules() -> list[str]:
    """Compiled modules older than their source, or than any core module (compiled code checks
    the types it was compiled against): the old compiled code would run."""
    core = max((p.stat().st_mtime for p in (APP_DIR / "core").rglob("*.py")), default=0.0)
    return sorted(
        name for name, ext in _extensions().items() if max(core, _source(name).stat().st_mtime) > ext.stat().st_mtime
    )


def describe() -> str:
    """One line for reports and benchmark headers."""
    names = compiled_modules()
    if not names:
        return "scoring: pure Python"
    return f"scoring: compiled with mypyc ({len(names)} modules)"


class _SourceFirst:
    """A meta-path finder that loads modules from their ``.py`` even when compiled ones exist."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.rpartition(".")[0] not in PACKAGES or not _source(fullname).exists():
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


def prefer_sources() -> None:
    """Make every later import of a compilable module load its source (idempotent)."""
    if not any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())


if pure_python_requested():
    prefer_sources()
