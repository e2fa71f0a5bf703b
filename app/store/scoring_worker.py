"""The scoring worker: a second process that parses and scores while this one stores.

Parsing and scoring cost about half of storing trajectories and writing their rows the
other half; on a machine with two cores a worker process does the first half
(``rows.score_batch`` builds the rows) and hands the scored batches back, and this
process only inserts: what ends up in the store is what the single-process path stores.
``ScoringWorker`` is that process; it takes two jobs:

- ``toollens import`` (``ScoringPipeline``, below): the worker reads the file, skips the
  lines the import refuses (``checked_lines``: not a record, stored already, a repeated
  key), scores the rest and hands over one batch at a time, a few ahead, so memory stays
  flat. The importing process still stores each batch in its own transaction, in file
  order, with its ids given at insert time.
- the OTLP receiver (``app.otlp.worker``): chunks of staged traces turned into scored rows.
"""

from __future__ import annotations

import marshal
import multiprocessing as mp
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

from app.core.errors import InvalidTrajectory
from app.core.records import Trajectory, parse_line
from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite
from app.store import rows
from app.store.gc_tuning import collect_cycles_rarely

_QUEUE_BATCHES = 4  # batches in flight: bounds the memory the pipeline holds
T = TypeVar("T")


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


def warm_up() -> int:
    """In the worker, first: cyclic garbage collected rarely (its batches make many objects
    that live until they are sent; what a fork copied is frozen, never finalised here);
    returns its pid."""
    collect_cycles_rarely(100_000, 50)
    return os.getpid()


def _exit_with_parent() -> None:
    """In the worker: exit when the parent process dies, however it dies (SIGKILL runs no
    shutdown). The pool's queues never report a dead parent (the worker holds their write ends
    too), so a killed parent would leave the worker, and the resource tracker it keeps open,
    running for good; the parent's sentinel (a pipe only the parent holds) reports it at once."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class ScoringWorker:
    """One worker process that runs what it is handed (``submit``), in order. ``start``: how it
    is started: ``fork`` (milliseconds, for a process without threads: the CLI) or ``spawn``
    (a fresh interpreter, for the web process, which has threads); ``warm`` runs in it first
    (``ready`` is its result), so that the first batch does not pay for the imports."""

    def __init__(self, *, start: str = "spawn", warm: Callable[[], int] = warm_up) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context(start), initializer=_exit_with_parent)
        self.ready: Future[int] = self._pool.submit(warm)  # start and load it now, not with the first batch
        self.killed = False

    @staticmethod
    def pays() -> bool:
        return (os.cpu_count() or 1) >= 2

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def kill(self) -> None:
        """End the worker process as a crash would (a stuck worker, a failed import; tests):
        what it holds fails at once, and nothing is left behind.

        A worker killed while it sends a result leaves half a message in the pool's result
        pipe; the pool's manager thread, reading it, would wait for the rest for ever (this
        process holds the pipe's write end too), and the interpreter joins that thread at
        exit: the process would hang after its own error. Closing this process's write end
        once the worker is dead ends that read (end of file: the pool is broken, its manager
        exits); the dead worker is reaped, not left a zombie."""
        self.killed = True
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        for process in processes:
            process.kill()
        for process in processes:
            process.join(timeout=10)
        results = getattr(self._pool, "_result_queue", None)
        writer = getattr(results, "_writer", None)
        if writer is not None and not any(p.is_alive() for p in processes):
            writer.close()
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            manager.join(timeout=10)


# -- the import's job: a file's batches, scored ahead of the inserts ----------------------------

# ("batch", line numbers, packed batch) | ("done", refused lines, None) | ("error", why, None)
Item = tuple[str, Any, Any]


def _scored_batches(
    path: Path, document: dict[str, Any], suite_source: str, stored: set[Key], batch: int, stop_at_bad: bool
) -> Iterator[Item]:
    """In the worker: ("batch", line numbers, scored batch) items, then ("done", the refused
    lines as (number, why), None). With ``stop_at_bad`` the first refused line ends the scoring
    (the import will fail); the rest of the file is still read, for the list of what is wrong with it."""
    scorer = Scorer(parse_suite(document, path=suite_source))
    bad: list[tuple[int, str]] = []
    pending: list[Trajectory] = []
    lines: list[int] = []
    for number, traj, why in checked_lines(path, stored):
        if traj is None:
            bad.append((number, why))
            continue
        if bad and stop_at_bad:
            continue
        pending.append(traj)
        lines.append(number)
        if len(pending) >= batch:
            yield "batch", lines, pack(rows.score_batch(scorer, pending))
            pending, lines = [], []
    if pending and not (bad and stop_at_bad):
        yield "batch", lines, pack(rows.score_batch(scorer, pending))
    yield "done", bad, None


# the job, set in the importing process just before it forks the worker: inherited, not sent (the keys a
# large run holds already, the suite)
_INHERITED: tuple[str, dict[str, Any], str, set[Key], int, bool] | None = None
_JOB: Iterator[Item] | None = None  # in the worker: the file being scored
_END: Item | None = None  # and its last item, once reached


def _begin() -> None:
    """In the worker: the file to score, as the fork inherited it (``_INHERITED``)."""
    global _JOB, _END
    assert _INHERITED is not None, "the import's worker is forked"
    path, document, suite_source, stored, batch, stop_at_bad = _INHERITED
    _JOB, _END = _scored_batches(Path(path), document, suite_source, stored, batch, stop_at_bad), None


def _next() -> Item:
    """In the worker: the file's next item (its last one again once it is reached)."""
    global _END
    if _END is not None or _JOB is None:
        return _END or ("error", "no file to score", None)
    try:
        item = next(_JOB)
    except Exception as exc:  # reported to the importing process, which raises
        item = ("error", f"{type(exc).__name__}: {exc}", None)
    if item[0] != "batch":
        _END = item
    return item


class ScoringPipeline:
    """A worker process scoring a file's batches ahead of the inserts (``_QUEUE_BATCHES`` at most
    scored and not stored yet: memory stays flat).

    ``stop_at_bad``: nobody checked the file first (a new run, checked while
    it is stored); the first refused line ends the scoring."""

    def __init__(
        self,
        path: Path,
        document: dict[str, Any],
        suite_source: str,
        stored: set[Key],
        batch: int,
        *,
        stop_at_bad: bool = False,
    ):
        # fork: no re-import of the main module, and a start in milliseconds; the
        # worker touches no connection, lock or thread of this process
        global _INHERITED
        _INHERITED = (str(path), document, suite_source, stored, batch, stop_at_bad)
        try:
            self._worker = ScoringWorker(start="fork")  # forked here: it inherits the job
        finally:
            _INHERITED = None
        self._worker.submit(_begin)
        self._ahead: deque[Future[Item]] = deque(self._worker.submit(_next) for _ in range(_QUEUE_BATCHES))
        self._done = False
        self.refused: list[tuple[int, str]] = []  # the file's refused lines, once the batches are read

    def batches(self, skip: set[int] | None = None) -> Iterator[tuple[list[int], rows.ScoredBatch]]:
        """The scored batches in file order; then ``refused`` holds the lines
        the worker refused. ``skip`` is what a check pass refused, if one ran:
        the worker must have refused the same lines, or the file changed while
        it was imported (an error, nothing more is stored)."""
        while True:
            try:
                kind, payload, scored = self._ahead.popleft().result()
            except BrokenProcessPool:
                raise RuntimeError("the scoring worker stopped unexpectedly") from None
            if kind == "error":
                raise RuntimeError(f"scoring worker: {payload}")
            if kind == "done":
                self._done = True
                if skip is not None and {n for n, _ in payload} != skip:
                    raise RuntimeError("the file changed while it was imported")
                self.refused = [(int(n), str(why)) for n, why in payload]
                return
            if skip is not None and skip.intersection(payload):
                raise RuntimeError("the file changed while it was imported")
            self._ahead.append(self._worker.submit(_next))
            yield payload, unpack(scored)

    def close(self) -> None:
        """Stop the worker (at once when the import failed; it has finished otherwise)."""
        if self._done:
            self._worker.close()
        else:
            self._worker.kill()


PIPELINE_MIN_BYTES = 1 << 20  # below this, starting a process costs more than it saves


def pipeline_pays(path: Path) -> bool:
    """Whether a file is worth a second process: two cores or more, and not a small file."""
    return (
        "fork" in mp.get_all_start_methods() and (os.cpu_count() or 1) > 1 and path.stat().st_size >= PIPELINE_MIN_BYTES
    )
