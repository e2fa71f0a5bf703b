"""A write's answer is sent once its transaction committed, never before: a client told 201 finds
what it wrote at once, and a commit that fails is an error, not a success (the session's
dependency ends before the response; FastAPI ends a ``yield`` dependency after it by default)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app
from tests.factories import EXAMPLES
from tests.servers import serve_in_thread

SUITE = load_suite_document(EXAMPLES / "suite_v1.yaml")


def test_a_created_run_is_committed_before_the_answer(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Session.commit

    def slow_commit(self: Session) -> None:  # a busy database: the commit takes a while
        time.sleep(0.4)
        real(self)

    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as h:
        monkeypatch.setattr(Session, "commit", slow_commit)
        created = h.post("/api/runs", json={"name": "live", "suite": SUITE})
        assert created.status_code == 201, created.text
        # at once, on another connection: the run is there
        assert h.get(f"/api/runs/{created.json()['id']}").status_code == 200


def test_a_commit_that_fails_is_an_error_and_stores_nothing(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Session.commit
    failing = [True]

    def commit(self: Session) -> Any:
        if failing[0]:  # the run's request: the database refuses its commit
            raise OperationalError("COMMIT", {}, Exception("disk I/O error"))
        return real(self)

    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as h:
        monkeypatch.setattr(Session, "commit", commit)
        answer = h.post("/api/runs", json={"name": "lost", "suite": SUITE})
        failing[0] = False
        assert not answer.is_success, answer.text
        assert h.get("/api/runs").json()["data"] == []
