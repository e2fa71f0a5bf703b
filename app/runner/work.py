"""The work of a run: one item per (case, trial, fault plan), in a fixed
order, so that a resumed run and every shard see the same list."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from app.core.errors import ToolLensError
from app.core.reports.profiles import BY_NAME, COOPERATIVE
from app.core.run.router import FaultPlan
from app.core.run.runner import sweep_plans
from app.core.suites.suite import Case, Suite


class ShardSpecError(ToolLensError):
    """``--shard`` is not ``I/N`` with 1 <= I <= N."""


@dataclass(frozen=True)
class WorkItem:
    """One case run. Its trial number is unique within its case (the sweep's
    runs are numbered after the plain trials), so (case, trial) names it
    whatever fault chance injects, and resume and shards need nothing else."""

    case: Case
    trial: int
    faults: FaultPlan | None
    variant: str  # "" for a plain trial, "sweep:<step>:<kind>" for the recovery sweep, "user:<profile>"
    profile: str = COOPERATIVE  # the simulated user's profile (cases with a simulated user only)
    mirrors: int | None = None  # under a profile: the cooperative trial whose agent (seed) and faults it reuses

    def agent_seed(self) -> tuple[int, str]:
        """The trial and variant the agent is made for: a profile's item gets the agent of the
        cooperative trial it mirrors, so a seeded agent draws the same chances and only the
        user differs (common random numbers: the gap is the user's, not the dice's)."""
        return (self.mirrors, "") if self.mirrors is not None else (self.trial, self.variant)

    @property
    def label(self) -> str:
        return f"{self.case.id} trial {self.trial}" + (f" {self.variant}" if self.variant else "")


def plan_work(
    suite: Suite,
    *,
    trials: int = 1,
    faults: FaultPlan | None = None,
    sweep: bool = False,
    sweep_kind: str = "http_503",
    profiles: Sequence[str] = (),
) -> list[WorkItem]:
    """Every case ``trials`` times (the fault plan reseeded per trial), then
    with ``sweep`` the recovery sweep of every case: trial ``trials + i`` fails
    the i-th call; then, for each non-cooperative user profile, each case with a
    simulated user ``trials`` times more under it, numbered after the sweep by the
    profile's place in PROFILES (so that two runs give a profile the same trials)."""
    items: list[WorkItem] = []
    for case in suite.cases:
        for t in range(trials):
            plan = None if faults is None else replace(faults, seed=faults.seed + t)
            items.append(WorkItem(case, t, plan, ""))
    if sweep:
        for case in suite.cases:
            for i, plan in enumerate(sweep_plans(case, sweep_kind)):  # i: the expected step failed
                items.append(WorkItem(case, trials + i, plan, f"sweep:{i}:{sweep_kind}"))
    others = [BY_NAME[p] for p in profiles if p != COOPERATIVE]
    for case in suite.cases if others else ():
        if case.user is None:
            continue
        base = trials + (len(sweep_plans(case, sweep_kind)) if sweep else 0)
        for profile in others:
            for t in range(trials):
                plan = None if faults is None else replace(faults, seed=faults.seed + t)
                items.append(
                    WorkItem(
                        case, base + (profile.index - 1) * trials + t, plan, f"user:{profile.name}", profile.name, t
                    )
                )
    return items


def parse_shard(spec: str) -> tuple[int, int]:
    """``I/N`` (I from 1 to N) -> (I, N)."""
    head, _, tail = spec.partition("/")
    try:
        index, count = int(head), int(tail)
    except ValueError:
        raise ShardSpecError(f"--shard {spec!r}: expected I/N, e.g. 2/4") from None
    if not 1 <= index <= count:
        raise ShardSpecError(f"--shard {spec!r}: I must be between 1 and N")
    return index, count


def shard_from_env(environ: Mapping[str, str]) -> str | None:
    """The shard a process takes when ``--shard`` is not given: ``TOOLLENS_SHARD``
    (``I/N``), or a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX`` (from 0)
    with ``TOOLLENS_SHARDS`` (N), so that one container command serves every
    shard. None when neither is set."""
    spec = environ.get("TOOLLENS_SHARD", "").strip()
    if spec:
        return spec
    index, count = environ.get("JOB_COMPLETION_INDEX", "").strip(), environ.get("TOOLLENS_SHARDS", "").strip()
    if not index and not count:
        return None
    if not (index.isdigit() and count.isdigit()):
        raise ShardSpecError(
            "JOB_COMPLETION_INDEX (from 0) and TOOLLENS_SHARDS (the number of shards) must both be "
            f"whole numbers, got {index!r} and {count!r}"
        )
    return f"{int(index) + 1}/{int(count)}"


def in_shard(item: WorkItem, index: int, count: int) -> bool:
    """A stable slice: by a checksum of the item's identity, not its position."""
    ident = f"{item.case.id}\x00{item.trial}\x00{item.variant}".encode()
    return zlib.crc32(ident) % count == index - 1


def still_missing(items: Iterable[WorkItem], stored: Iterable[tuple[str, int, str]]) -> list[WorkItem]:
    """The items a run does not hold yet: those whose (case, trial) it lacks."""
    done = {(case_id, trial) for case_id, trial, _ in stored}
    return [item for item in items if (item.case.id, item.trial) not in done]
