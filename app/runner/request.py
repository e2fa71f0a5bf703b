"""What ``toollens run`` was asked (``RunRequest``, and the part of it a run keeps), and the
error of a run that cannot start as asked. Read by the session (``app.runner.session``) and the
agents' registry (``app.runner.agents``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import ToolLensError

RUNNER_MARK, RUNNER_VERSION = "runner", 1  # in a run's config: made by `toollens run`, so it can be resumed
WORK_KEYS = ("trials", "faults", "sweep", "sweep_kind", "user_profiles")  # the work list: fixed for a run's life
AGENT_KEYS = (
    "agent",
    "model",
    "base_url",
    "max_steps",
    "system",
    "temperature",
    "seed",
    "sim_rates",
    "user_model",
    "user_base_url",
)


class RunSetupError(ToolLensError):
    """The run cannot start as asked (bad options, a name taken, a mismatch)."""


@dataclass
class RunRequest:
    """What ``toollens run`` was asked; ``config()`` is what the run keeps."""

    agent: str = "simulated"
    suite_path: Path | None = None
    model: str = ""
    base_url: str | None = None
    trials: int = 1
    faults: str | None = None
    sweep: bool = False
    sweep_kind: str = "http_503"
    concurrency: int = 4
    run_name: str | None = None
    resume: str | None = None
    shard: str | None = None
    max_steps: int = 12
    system: str | None = None
    temperature: float | None = None
    timeout: float = 60.0
    attempts: int = 5
    backoff: float = 0.5
    seed: int = 0
    sim_rates: str = ""
    user_model: str = ""  # a user model for cases with a simulated user (else the rule-based stand-in)
    user_base_url: str | None = None  # its OpenAI-compatible endpoint (default: base_url)
    user_profiles: list[str] = field(default_factory=list)  # the simulated user's profiles (none: cooperative only)
    suite_document: dict[str, Any] | None = field(default=None, repr=False)  # instead of suite_path

    def config(self) -> dict[str, Any]:
        data = asdict(self)
        return {RUNNER_MARK: RUNNER_VERSION, **{k: data[k] for k in (*WORK_KEYS, *AGENT_KEYS)}}
