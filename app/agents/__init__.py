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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.core.errors import ToolLensError
from app.core.suite import Case

AGENT_KINDS = ("openai", "anthropic", "simulated", "module:function")


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


def load_callable(spec: str) -> Callable[..., Any]:
    """``package.module:function`` (the working directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AgentSpecError(f"--agent {spec!r}: expected one of {', '.join(AGENT_KINDS)}")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentSpecError(f"--agent {spec!r}: cannot import {module_name!r} ({exc})") from None
    except Exception as exc:  # the module itself fails to load: say how, in one line
        raise AgentSpecError(f"--agent {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") \
            from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentSpecError(f"--agent {spec!r}: {module_name!r} has no {attr!r}")
    if not callable(target):
        raise AgentSpecError(f"--agent {spec!r}: {attr!r} is not callable")
    return target  # type: ignore[no-any-return]
