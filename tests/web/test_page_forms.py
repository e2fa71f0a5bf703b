"""The trajectory page's forms (a label, a case for a suite) do their
database work off the event loop: while one waits on a slow store call,
another request is answered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.store import curation, labels
from tests.factories import examples_client

SAME_ORIGIN = {"sec-fetch-site": "same-origin"}


def _slowed(real: Callable[..., Any], entered: threading.Event, release: threading.Event) -> Callable[..., Any]:
    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(3)  # on the event loop, this holds every other request for 3 s
        return real(*args, **kwargs)

    return slow


@pytest.mark.parametrize(
    ("module", "name", "path", "form"),
    [
        (labels, "set_label", "label", {"label": "recovered", "author": "ana"}),
        (curation, "add_case", "curate", {"case_id": "slow-1", "suite": "1", "keep.0": "on"}),
    ],
)
def test_a_form_waiting_on_the_store_does_not_block_other_requests(
    db_url: str, monkeypatch: pytest.MonkeyPatch, module: Any, name: str, path: str, form: dict[str, str]
) -> None:
    entered, release = threading.Event(), threading.Event()
    monkeypatch.setattr(module, name, _slowed(getattr(module, name), entered, release))
    with examples_client(db_url, "v1") as c:
        faulted = c.get("/api/runs/1/trajectories", params={"outcome": "recovered", "limit": 1}).json()["data"]
        url = f"/trajectories/{faulted[0]['id']}/{path}"  # a trajectory with an outcome: it takes a label

        async def both() -> tuple[bool, int, int]:
            transport = httpx.ASGITransport(app=c.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                posted = asyncio.create_task(client.post(url, data=form, headers=SAME_ORIGIN))
                while not entered.is_set():  # the form's request has reached the slow store call
                    await asyncio.sleep(0.01)
                health = await asyncio.wait_for(client.get("/api/health"), 2)
                pending = not posted.done()  # answered while the form still waits on the store
                release.set()
                return pending, health.status_code, (await posted).status_code

        try:
            pending, health, status = asyncio.run(both())
        finally:
            release.set()
    assert health == 200
    assert pending, "the form's store call ran on the event loop: nothing else was answered meanwhile"
    assert status == 303  # stored: a label, or the suite's next version
