"""Import pipelining: a second process parses and scores while this one inserts.

``toollens import`` spends about half its time parsing and scoring and half
writing rows. On a machine with two cores a worker process reads the file,
skips the lines the import refuses (``checked_lines``: not a record, stored
already, a repeated key), scores the rest and builds their rows
(``rows.score_batch``), and hands over one batch at a time through a small
bounded queue, so memory stays flat. The importing process still stores each
batch in its own transaction, in file order, with its ids given at insert
time: what ends up in the store is what the single-process path stores.
"""

from __future__ import annotations

import marshal
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
from app.store.gc_tuning import collect_cycles_rarely

_QUEUE_BATCHES = 4  # batches in flight: bounds the memory the pipeline holds


def pack(batch: rows.ScoredBatch) -> bytes:
    """A scored batch as it crosses to the importing process: its rows are plain
    tuples of str, int, float, bool and None, which marshal writes in about half
    the time pickle takes."""
    return marshal.dumps((batch.keys, batch.trajectories, batch.calls, batch.tags, batch.counters))


def unpack(data: bytes) -> rows.ScoredBatch:
    keys, trajectories, calls, tags, counters = marshal.loads(data)
    return rows.ScoredBatch(keys, trajectories, calls, tags, counters)


Key = tuple[str, int, str]


def checked_lines(path: Path, stored: set[Key]) -> Iterator[tuple[int, Trajectory | None, str]]:
    """Every non-blank line of a trajectories file with the import's verdict:
    ``(number, record, "")`` for a line it stores, ``(number, None, why)`` for
    one it refuses (not a record, stored already in the run, or the same case,
    trial and fault as an earlier line)."""
    seen: dict[Key, int] = {}
    source = str(path)
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                traj = parse_line(line, index=number, source=source)
            except InvalidTrajectory as exc:
                yield number, None, f"{exc.field}: {exc.detail}" if exc.field else exc.detail
                continue
            key = (traj.case_id, traj.trial, rows.fault_key(traj))
            if key in stored:
                yield number, None, f"case {traj.case_id!r} trial {traj.trial} is stored already in this run"
            elif key in seen:
                yield number, None, f"same case, trial and fault as line {seen[key]}"
            else:
                seen[key] = number
                yield number, traj, ""


def _work(path: str, document: dict[str, Any], suite_source: str, stored: set[Key], batch: int, stop_at_bad: bool,
          out: Any, parent: int) -> None:
    """The worker: ("batch", line numbers, scored batch) items, then ("done",
    the refused lines as (number, why), None). With ``stop_at_bad`` the first
    refused line ends the scoring (the import will fail); the rest of the file
    is still read, for the list of what is wrong with it."""
    # frozen: what the fork copied (the parent's connections among it) is never finalised here
    collect_cycles_rarely(100_000, 50)

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
        bad: list[tuple[int, str]] = []
        pending: list[Trajectory] = []
        lines: list[int] = []
        for number, traj, why in checked_lines(Path(path), stored):
            if traj is None:
                bad.append((number, why))
                continue
            if bad and stop_at_bad:
                continue
            pending.append(traj)
            lines.append(number)
            if len(pending) >= batch:
                put(("batch", lines, pack(rows.score_batch(scorer, pending))))
                pending, lines = [], []
        if pending and not (bad and stop_at_bad):
            put(("batch", lines, pack(rows.score_batch(scorer, pending))))
        put(("done", bad, None))
    except SystemExit:
        raise
    except BaseException as exc:  # reported to the importing process, which raises
        put(("error", f"{type(exc).__name__}: {exc}", None))


class ScoringPipeline:
    """A worker process scoring a file's batches ahead of the inserts.

    ``stop_at_bad``: nobody checked the file first (a new run, checked while
    it is stored); the first refused line ends the scoring."""

    def __init__(self, path: Path, document: dict[str, Any], suite_source: str, stored: set[Key], batch: int,
                 *, stop_at_bad: bool = False):
        # fork: no re-import of the main module, and a start in milliseconds; the
        # worker touches no connection, lock or thread of this process
        ctx = mp.get_context("fork")
        self._queue: Any = ctx.Queue(maxsize=_QUEUE_BATCHES)
        self._process = ctx.Process(target=_work, args=(str(path), document, suite_source, stored, batch,
                                                         stop_at_bad, self._queue, os.getpid()), daemon=True)
        self._process.start()
        self.refused: list[tuple[int, str]] = []  # the file's refused lines, once the batches are read

    def batches(self, skip: set[int] | None = None) -> Iterator[tuple[list[int], rows.ScoredBatch]]:
        """The scored batches in file order; then ``refused`` holds the lines
        the worker refused. ``skip`` is what a check pass refused, if one ran:
        the worker must have refused the same lines, or the file changed while
        it was imported (an error, nothing more is stored)."""
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
                if skip is not None and {n for n, _ in payload} != skip:
                    raise RuntimeError("the file changed while it was imported")
                self.refused = [(int(n), str(why)) for n, why in payload]
                return
            if skip is not None and skip.intersection(payload):
                raise RuntimeError("the file changed while it was imported")
            yield payload, unpack(scored)

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
