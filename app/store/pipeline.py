"""Import pipelining: a second process parses and scores while this one inserts.

``toollens import`` spends about half its time parsing and scoring and half
writing rows. On a machine with two cores a worker process reads the file,
skips the lines the check pass refuses (same rules: not a record, stored
already, a repeated key), scores the rest and builds their rows
(``rows.score_batch``), and hands over one batch at a time through a small
bounded queue, so memory stays flat. The importing process still stores each
batch in its own transaction, in file order, with its ids given at insert
time: what ends up in the store is what the single-process path stores.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory
from app.core.records import Trajectory, parse_line
from app.core.scoring import Scorer
from app.core.suite import parse_suite
from app.store import rows

_QUEUE_BATCHES = 4  # batches in flight: bounds the memory the pipeline holds


def good_lines(path: Path, stored: set[tuple[str, int, str]],
               bad: list[int] | None = None) -> Iterator[tuple[int, Trajectory]]:
    """The lines the import stores, with their records; the others go to ``bad``
    (the check pass's rules, ``importer._check_lines``)."""
    seen: set[tuple[str, int, str]] = set()
    source = str(path)
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                traj = parse_line(line, index=number, source=source)
            except InvalidTrajectory:
                if bad is not None:
                    bad.append(number)
                continue
            key = (traj.case_id, traj.trial, rows.fault_key(traj))
            if key in stored or key in seen:
                if bad is not None:
                    bad.append(number)
                continue
            seen.add(key)
            yield number, traj


def _work(path: str, document: dict[str, Any], suite_source: str, stored: set[tuple[str, int, str]], batch: int,
          out: Any, parent: int) -> None:
    """The worker: (line numbers, scored batch) items, then ("done", bad line numbers)."""
    gc.freeze()  # what the fork copied (the parent's connections among it) is never finalised here

    def put(item: tuple[str, Any, Any]) -> None:
        while True:
            try:
                out.put(item, timeout=1)
                return
            except queue.Full:
                if os.getppid() != parent:  # the importing process is gone: stop, do not wait forever
                    out.cancel_join_thread()  # nor for the queue's feeder thread to flush into the pipe
                    raise SystemExit(1) from None

    try:
        scorer = Scorer(parse_suite(document, path=suite_source))
        bad: list[int] = []
        pending: list[Trajectory] = []
        lines: list[int] = []
        for number, traj in good_lines(Path(path), stored, bad):
            pending.append(traj)
            lines.append(number)
            if len(pending) >= batch:
                put(("batch", lines, rows.score_batch(scorer, pending)))
                pending, lines = [], []
        if pending:
            put(("batch", lines, rows.score_batch(scorer, pending)))
        put(("done", bad, None))
    except SystemExit:
        raise
    except BaseException as exc:  # reported to the importing process, which raises
        put(("error", f"{type(exc).__name__}: {exc}", None))


class ScoringPipeline:
    """A worker process scoring a file's batches ahead of the inserts."""

    def __init__(self, path: Path, document: dict[str, Any], suite_source: str,
                 stored: set[tuple[str, int, str]], batch: int):
        # fork: no re-import of the main module, and a start in milliseconds; the
        # worker touches no connection, lock or thread of this process
        ctx = mp.get_context("fork")
        self._queue: Any = ctx.Queue(maxsize=_QUEUE_BATCHES)
        self._process = ctx.Process(target=_work, args=(str(path), document, suite_source, stored, batch,
                                                         self._queue, os.getpid()), daemon=True)
        self._process.start()

    def batches(self, skip: set[int]) -> Iterator[tuple[list[int], rows.ScoredBatch]]:
        """The scored batches in file order. ``skip`` is what the check pass
        refused: the worker must have refused the same lines, or the file
        changed while it was imported (an error, nothing more is stored)."""
        while True:
            try:
                kind, payload, scored = self._queue.get(timeout=5)
            except queue.Empty:
                if not self._process.is_alive():
                    raise RuntimeError("the scoring worker stopped unexpectedly") from None
                continue
            if kind == "error":
                raise RuntimeError(f"scoring worker: {payload}")
            if kind == "done":
                if set(payload) != skip:
                    raise RuntimeError("the file changed while it was imported")
                return
            if skip.intersection(payload):
                raise RuntimeError("the file changed while it was imported")
            yield payload, scored

    def close(self) -> None:
        """Stop the worker (at once when the import failed; it has finished otherwise)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(timeout=10)
        self._queue.close()
        self._queue.cancel_join_thread()


PIPELINE_MIN_BYTES = 1 << 20  # below this, starting a process costs more than it saves


def pipeline_pays(path: Path) -> bool:
    """Whether a file is worth a second process: two cores or more, and not a small file."""
    return ("fork" in mp.get_all_start_methods() and (os.cpu_count() or 1) > 1
            and path.stat().st_size >= PIPELINE_MIN_BYTES)
