"""``toollens judge``: the LLM judge over a stored run's faulted trajectories."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, read_settings

CHUNK = 100  # trajectories read, judged and stored together


async def _classify(grader: Any, chunk: list[Any], concurrency: int) -> list[tuple[int, tuple[str, str] | None]]:
    """The judge's verdicts on a chunk, ``concurrency`` requests in flight."""
    from app.agents.judge import judge_prompt

    verdicts: list[tuple[int, tuple[str, str] | None]] = []
    shared = iter(chunk)

    async def work() -> None:
        for tid, record, datum in shared:
            verdicts.append((tid, await grader.classify(judge_prompt(record, datum))))

    import asyncio

    await asyncio.gather(*(work() for _ in range(concurrency)))
    return verdicts


async def _judge_run(
    grader: Any, sessions: Any, run_id: int, relabel: bool, concurrency: int, model: str
) -> tuple[int, int]:
    """Judge the run a chunk at a time, each chunk's verdicts stored before
    the next is asked (a crash loses one chunk at most); returns (judged, unreadable)."""
    from app.store.db import session_scope
    from app.store.labels import set_label, to_judge

    judged = unreadable = last = 0
    try:
        while True:
            with session_scope(sessions) as session:
                chunk = to_judge(session, run_id, relabel=relabel, after_id=last, limit=CHUNK)
            if not chunk:
                return judged, unreadable
            last = chunk[-1][0]
            verdicts = await _classify(grader, chunk, concurrency)
            with session_scope(sessions, write=True) as session:
                for tid, verdict in verdicts:
                    if verdict is not None:
                        set_label(session, tid, source="judge", label=verdict[0], author=model, reason=verdict[1])
            judged += sum(1 for _, v in verdicts if v is not None)
            unreadable += sum(1 for _, v in verdicts if v is None)
    finally:
        close = getattr(grader, "aclose", None)
        if close is not None:
            await close()


def register(cli: typer.Typer) -> None:
    cli.command("judge")(judge)


def judge(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    model: Annotated[str, typer.Option(help="Judge model (OpenAI-compatible chat completions).")],
    base_url: Annotated[str | None, typer.Option(help="Endpoint base URL; the key comes from OPENAI_API_KEY.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Requests in flight.")] = 4,
    relabel: Annotated[bool, typer.Option("--relabel", help="Judge again what was judged already.")] = False,
    timeout: Annotated[float, typer.Option(min=0.01, help="Seconds per request.")] = 60.0,
    attempts: Annotated[int, typer.Option(min=1, max=20, help="Tries per request (429/5xx/timeouts).")] = 5,
    db: DbOption = None,
) -> None:
    """Classify each faulted trajectory's outcome with an LLM judge; report its agreement."""
    from app.agents.judge import Judge
    from app.agents.retry import RetryPolicy
    from app.store import ingest
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store
    from app.store.labels import agreements

    console = Console(stderr=True, soft_wrap=True)
    grader = Judge(model=model, base_url=base_url, timeout=timeout, retry=RetryPolicy(attempts=attempts))
    engine = open_store(read_settings(db))
    try:
        sessions = make_sessionmaker(engine)
        with session_scope(sessions) as session:
            run_id = ingest.find_run(session, run).id
        import asyncio

        judged, unreadable = asyncio.run(_judge_run(grader, sessions, run_id, relabel, concurrency, model))
        with session_scope(sessions) as session:
            agree = agreements(session, run_id)
    finally:
        engine.dispose()
    console.print(
        Text(
            f"judged {judged} trajectories of run {run_id}"
            + (f"; {unreadable} answers were not one of the four categories" if unreadable else "")
        )
    )
    from rich.table import Table

    table = Table("raters", "both labelled", "agree", "rate", "Cohen's kappa")
    for a in agree:
        table.add_row(
            f"{a.a} vs {a.b}",
            str(a.n),
            str(a.agree),
            "–" if a.rate is None else f"{a.rate:.2f}",
            "–" if a.kappa is None else f"{a.kappa:.2f}",
        )
    console.print(table)
