"""The evaluation core: tools, mocks, faults, scoring and the suite format.

Imports neither a web framework nor a database layer, so it can be used from
a notebook, a pytest plugin or a CI script with no server. Each name below is
imported on first use (PEP 562): ``toollens score`` loads no agent runner.

The rooms: ``suites/``, what reads and checks a suite; ``run/``, what runs an agent through the
cases; ``score/``, what scores a trajectory; ``reports/``, what reports and gates; ``advise/``, what
advises on a toolset and a suite (lint, fix, curate); at the top, the vocabulary they share
(records, errors, usage and prices…).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.errors import InvalidTrajectory, SuiteError, ToolLensError, ToolSpecError
    from app.core.records import Call, CallError, Fault, Trajectory, iter_jsonl, parse_record, read_jsonl
    from app.core.reports.evaluate import score_trajectories
    from app.core.reports.report import Ratio, Report, pass_hat_k
    from app.core.run.router import FaultPlan, MockRouter, Toolbox
    from app.core.run.runner import Agent, arun_case, recovery_sweep, run_case, run_suite
    from app.core.score.scoring import Scorer, TrajectoryScore
    from app.core.suites.suite import Case, Suite, load_suite, parse_suite
    from app.core.suites.tools import Toolset, ToolSpec

_MODULES = {
    "errors": ("InvalidTrajectory", "SuiteError", "ToolLensError", "ToolSpecError"),
    "reports.evaluate": ("score_trajectories",),
    "records": ("Call", "CallError", "Fault", "Trajectory", "iter_jsonl", "parse_record", "read_jsonl"),
    "reports.report": ("Ratio", "Report", "pass_hat_k"),
    "run.router": ("FaultPlan", "MockRouter", "Toolbox"),
    "run.runner": ("Agent", "arun_case", "recovery_sweep", "run_case", "run_suite"),
    "score.scoring": ("Scorer", "TrajectoryScore"),
    "suites.suite": ("Case", "Suite", "load_suite", "parse_suite"),
    "suites.tools": ("Toolset", "ToolSpec"),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "Agent",
    "Call",
    "CallError",
    "Case",
    "Fault",
    "FaultPlan",
    "InvalidTrajectory",
    "MockRouter",
    "Ratio",
    "Report",
    "Scorer",
    "Suite",
    "SuiteError",
    "ToolLensError",
    "ToolSpec",
    "ToolSpecError",
    "Toolbox",
    "Toolset",
    "Trajectory",
    "TrajectoryScore",
    "arun_case",
    "iter_jsonl",
    "load_suite",
    "parse_record",
    "parse_suite",
    "pass_hat_k",
    "read_jsonl",
    "recovery_sweep",
    "run_case",
    "run_suite",
    "score_trajectories",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
