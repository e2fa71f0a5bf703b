"""The work of a run: one item per (case, trial, fault plan), in a fixed
order, so that a resumed run and every shard see the same list."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace

from app.core.errors import ToolLensError
from app.core.router import FaultPlan
from app.core.runner import sweep_plans
from app.core.suite import Case, Suite


class ShardSpecError(ToolLensError):
    """``--shard`` is not ``I/N`` with 1 <= I <= N."""


@dataclass(frozen=True)
class WorkItem:
    case: Case
    trial: int
    faults: FaultPlan | None
    variant: str  # "" for a plain trial, "sweep:<step>:<kind>" for the recovery sweep
    key: str | None  # the fault key its trajectory will be stored under; None when chance decides it

    @property
    def label(self) -> str:
        return f"{self.case.id} trial {self.trial}" + (f" {self.variant}" if self.variant else "")


def predicted_fault_key(plan: FaultPlan | None) -> str | None:
    """The stored fault key of a trajectory run under ``plan``, when the plan
    alone decides it: "" without faults, "<step>:<kind>" for index-only plans."""
    if plan is None or plan.empty:
        return ""
    if plan.by_index and not plan.by_tool and plan.probability == 0.0:
        step = min(plan.by_index)
        return f"{step}:{plan.by_index[step]}"
    return None


def plan_work(suite: Suite, *, trials: int = 1, faults: FaultPlan | None = None, sweep: bool = False,
              sweep_kind: str = "http_503") -> list[WorkItem]:
    """Every case ``trials`` times (the fault plan reseeded per trial), then
    with ``sweep`` the recovery sweep of every case (trial 0, the i-th call failed)."""
    items: list[WorkItem] = []
    for case in suite.cases:
        for t in range(trials):
            plan = None if faults is None else replace(faults, seed=faults.seed + t)
            items.append(WorkItem(case, t, plan, "", predicted_fault_key(plan)))
    if sweep:
        for case in suite.cases:
            for plan in sweep_plans(case, sweep_kind):
                step = min(plan.by_index)
                items.append(WorkItem(case, 0, plan, f"sweep:{step}:{sweep_kind}", f"{step}:{sweep_kind}"))
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


def in_shard(item: WorkItem, index: int, count: int) -> bool:
    """A stable slice: by a checksum of the item's identity, not its position."""
    ident = f"{item.case.id}\x00{item.trial}\x00{item.variant}".encode()
    return zlib.crc32(ident) % count == index - 1


def still_missing(items: Iterable[WorkItem], stored: set[tuple[str, int, str]]) -> list[WorkItem]:
    """The items a run does not hold yet. An item whose fault chance decides
    counts as done when its case and trial hold a trajectory that no planned
    item of the case claims."""
    items = list(items)
    claimed = {(i.case.id, i.trial, i.key) for i in items if i.key is not None}
    by_trial = {(c, t) for c, t, f in stored if (c, t, f) not in claimed}
    out = []
    for item in items:
        if item.key is not None:
            done = (item.case.id, item.trial, item.key) in stored
        else:
            done = (item.case.id, item.trial) in by_trial
        if not done:
            out.append(item)
    return out
