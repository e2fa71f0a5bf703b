"""Agents under test: adapters that turn a model endpoint (or any callable)
into the core's agent protocol ``agent(question, toolbox) -> answer``.

The runner asks a factory for one agent per case run (``for_case``), so that
seeded agents such as the simulated one can differ per case, trial and fault
plan; adapters of real models return themselves, and start a conversation
object of their own per multi-turn case run (``new_conversation``).
Simulated users, which say the user's side of those, are in ``users``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from app.core.errors import ToolLensError
from app.core.suites.suite import Case


class AgentSpecError(ToolLensError):
    """``--agent`` names something that cannot be loaded."""


class AgentFactory(Protocol):
    label: str

    def for_case(self, case: Case, trial: int, variant: str = "") -> Callable[..., Any]: ...


@dataclass
class SameAgent:
    """A factory that hands out the same agent for every case run."""

    agent: Callable[..., Any]
    label: str

    def for_case(self, case: Case, trial: int, variant: str = "") -> Callable[..., Any]:
        return self.agent


def load_callable(spec: str, *, expected: Sequence[str]) -> Callable[..., Any]:
    """``package.module:function`` (the working directory is importable) or
    ``path/to/file.py:function`` (its folder is importable, for its own imports).
    ``expected``: what ``--agent`` takes, for the error of a spec of neither shape."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise AgentSpecError(f"--agent {spec!r}: expected one of {', '.join(expected)}")
    try:
        module = _import_file(module_name) if _is_file(module_name) else _import_module(module_name)
    except AgentSpecError as exc:
        raise AgentSpecError(f"--agent {spec!r}: {exc}") from None
    except Exception as exc:  # the module itself fails to load: say how, in one line
        raise AgentSpecError(
            f"--agent {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentSpecError(f"--agent {spec!r}: {module_name!r} has no {attr!r}")
    if not callable(target):
        raise AgentSpecError(f"--agent {spec!r}: {attr!r} is not callable")
    return target  # type: ignore[no-any-return]


def _is_file(name: str) -> bool:
    return name.endswith(".py") or "/" in name or "\\" in name


def _import_module(name: str) -> ModuleType:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise AgentSpecError(
                f"cannot import {name!r}: no module {exc.name!r} in {cwd} or on PYTHONPATH "
                f"(give a file as path/to/file.py:function)"
            ) from None
        raise AgentSpecError(f"cannot import {name!r} ({exc})") from None


def _import_file(name: str) -> ModuleType:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise AgentSpecError(f"no file {name!r} (from {Path.cwd()})")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name = path.stem if path.stem.isidentifier() else "toollens_agent"
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    found = importlib.util.spec_from_file_location(module_name, path)
    if found is None or found.loader is None:
        raise AgentSpecError(f"{name!r} is not a Python file")
    module = importlib.util.module_from_spec(found)
    sys.modules[module_name] = module  # as an import would: dataclasses and pickling look it up
    try:
        found.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
