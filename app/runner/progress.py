"""The rich progress bar of ``toollens run``: done/total, failures so far,
infrastructure errors and the rate."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from app.runner.execute import RunSummary


class RunProgress:
    """A context manager whose ``update`` is the runner's listener."""

    def __init__(self, title: str, total: int, console: Console | None = None):
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed [red]{task.fields[failed]}"),
            TextColumn("infra [yellow]{task.fields[infra]}"),
            TextColumn("{task.fields[rate]:.1f} case/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self.task: TaskID = self.progress.add_task(title, total=total, failed=0, infra=0, rate=0.0)

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.stop()

    def update(self, summary: RunSummary) -> None:
        rate = summary.done / summary.elapsed if summary.elapsed > 0 else 0.0
        self.progress.update(
            self.task, completed=summary.done, failed=summary.failed, infra=summary.infra_errors, rate=rate
        )
