"""Suite versions under load: concurrent adds chain, /api/suites pages, and a
version that adds a case stores the case, not another copy of the suite."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import httpx
import sqlalchemy as sa

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.store.db import make_engine
from app.web.app import create_app
from tests.factories import EXAMPLES, examples_client
from tests.servers import serve_in_thread
from tests.store.test_curation import _saldo

WRITERS = 20


def test_twenty_writers_adding_to_one_version_at_once_chain_their_versions(db_url: str) -> None:
    with examples_client(db_url, "v1") as c:
        suite_id, tid = _saldo(c)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:
        barrier = threading.Barrier(WRITERS)
        statuses: list[int] = []

        def add(i: int) -> None:
            with httpx.Client(base_url=base, timeout=120) as h:
                barrier.wait()
                r = h.post(f"/api/suites/{suite_id}/cases", json={"trajectory_id": tid, "case_id": f"w{i:02d}"})
                statuses.append(r.status_code)

        threads = [threading.Thread(target=add, args=(i,)) for i in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == [201] * WRITERS
        with httpx.Client(base_url=base) as h:
            versions = sorted(h.get("/api/suites").json(), key=lambda s: s["version"])
            # one number per version, each the child of the one before, each holding every case added before it
            assert [s["version"] for s in versions] == list(range(1, WRITERS + 2))
            assert [s["parent_id"] for s in versions] == [None] + [s["id"] for s in versions[:-1]]
            assert [s["cases"] for s in versions] == list(range(18, 18 + WRITERS + 1))
            last = h.get(f"/api/suites/{versions[-1]['id']}").json()["document"]
            assert sorted(x["id"] for x in last["cases"] if x["id"].startswith("w")) == [
                f"w{i:02d}" for i in range(WRITERS)
            ]
            for older, newer in itertools.pairwise(versions):
                a = [x["id"] for x in h.get(f"/api/suites/{older['id']}").json()["document"]["cases"]]
                b = [x["id"] for x in h.get(f"/api/suites/{newer['id']}").json()["document"]["cases"]]
                assert b[:-1] == a


def _suite(name: str, cases: int, pad: int = 0) -> dict[str, Any]:
    doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
    case = doc["cases"][0]
    return {
        **doc,
        "name": name,
        "cases": [{**case, "id": f"c{i}", "question": f"{i} " + "x" * pad} for i in range(cases)],
    }


def _stored_bytes(url: str) -> int:
    engine = make_engine(url)
    size = "length(CAST({} AS TEXT))"
    with engine.connect() as conn:
        parts = conn.execute(sa.text(f"SELECT coalesce(sum({size.format('document')}), 0) FROM suite_parts")).scalar()
        rows = conn.execute(
            sa.text(f"SELECT sum({size.format('document')} + coalesce({size.format('parts')}, 0)) FROM suites")
        ).scalar()
    engine.dispose()
    return int(parts or 0) + int(rows or 0)


def test_three_small_cases_on_a_big_suite_store_the_cases_not_three_copies(db_url: str) -> None:
    big = _suite("grande", 1000, pad=4000)  # about 4.5 MB of cases
    with examples_client(db_url) as c:
        run = c.post("/api/runs", json={"name": "r", "suite": big}).json()
        rec = {"case_id": "c0", "question": "q", "answer": "a", "calls": []}
        assert c.post(f"/api/runs/{run['id']}/trajectories", json={"trajectories": [rec]}).status_code == 200
        tid = c.get(f"/api/runs/{run['id']}/trajectories").json()["data"][0]["id"]
        one = _stored_bytes(db_url)
        assert one > 4_000_000
        for i in range(3):
            r = c.post(f"/api/suites/{run['suite_id']}/cases", json={"trajectory_id": tid, "case_id": f"n{i}"})
            assert r.status_code == 201, r.text
        assert r.json()["suite"]["cases"] == 1003
        # each version adds its case and a list of 1,000 hashes (about 70 KB), never another 4.5 MB
        assert _stored_bytes(db_url) - one < 300_000
        doc = c.get(f"/api/suites/{r.json()['suite']['id']}").json()["document"]
        assert [x["id"] for x in doc["cases"]][-4:] == ["c999", "n0", "n1", "n2"]
        assert doc["cases"][5]["question"] == "5 " + "x" * 4000 and doc["name"] == "grande"


def test_suites_page_past_500_and_the_runs_own_suite_is_always_offered(db_url: str) -> None:
    from app.store.db import make_sessionmaker, session_scope
    from app.store.ingest import ensure_suite

    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine), write=True) as session:
        for i in range(560):
            ensure_suite(session, _suite(f"a{i:03d}", 1))
    engine.dispose()
    with examples_client(db_url, "v1") as c:  # atencion-cliente-v1 sorts after the 560 others
        first = c.get("/api/suites")
        assert first.status_code == 200 and len(first.json()) == 500
        assert first.headers["x-total-count"] == "561"
        assert first.headers["link"] == '</api/suites?limit=500&offset=500>; rel="next"'
        rest = c.get("/api/suites", params={"offset": 500})
        assert len(rest.json()) == 61 and "link" not in rest.headers
        names = [s["name"] for s in first.json() + rest.json()]
        assert names == sorted(names) and names[-1] == "atencion-cliente-v1"
        assert c.get("/api/suites", params={"limit": 501}).status_code == 422
        _, tid = _saldo(c)
        page = c.get(f"/trajectories/{tid}").text
        own = next(s for s in rest.json() + first.json() if s["name"] == "atencion-cliente-v1")
        assert f'<option value="{own["id"]}" selected>atencion-cliente-v1 · version 1 (18 cases)</option>' in page


def test_the_migration_numbers_duplicates_again_and_keeps_every_document_whole(tmp_path: Any) -> None:
    import json

    from app.store import suites
    from app.store.db import make_sessionmaker, session_scope, upgrade
    from app.store.models import SuiteRow

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0009")
    engine = make_engine(url)
    docs = {
        sid: {"name": "s", "toolset": {"tools": []}, "cases": [{"id": "same"}, {"id": f"own{sid}"}]}
        for sid in (1, 2, 3)
    }
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO toolset_versions (id, toolset, hash, label, tools, created_at) "
                "VALUES (1, 't', 'h', '', '[]', '2026-01-01')"
            )
        )
        for sid, version in [(1, 1), (2, 2), (3, 2)]:  # two writers took number 2
            conn.execute(
                sa.text(
                    "INSERT INTO suites (id, name, hash, document, toolset_version_id, created_at, "
                    "version) VALUES (:id, 's', :hash, :doc, 1, '2026-01-01', :v)"
                ),
                {"id": sid, "hash": f"h{sid}", "doc": json.dumps(docs[sid]), "v": version},
            )
    upgrade(url)
    with session_scope(make_sessionmaker(engine)) as session:
        rows = list(session.scalars(sa.select(SuiteRow).order_by(SuiteRow.id)))
        assert [(r.id, r.version) for r in rows] == [(1, 1), (2, 2), (3, 3)]
        assert [suites.suite_document(session, r) for r in rows] == [docs[1], docs[2], docs[3]]
        assert [r.legacy_document for r in rows] == [{}, {}, {}] and [r.case_count for r in rows] == [2, 2, 2]
    with engine.connect() as conn:  # the head and the shared case once, each own case once
        assert conn.execute(sa.text("SELECT count(*) FROM suite_parts")).scalar() == 5
    from alembic import command

    from app.store.db import _alembic_config

    command.downgrade(_alembic_config(url), "0009")  # and back: the documents whole again
    with engine.connect() as conn:
        back = [json.loads(d) for (d,) in conn.execute(sa.text("SELECT document FROM suites ORDER BY id"))]
    engine.dispose()
    assert back == [docs[1], docs[2], docs[3]]
