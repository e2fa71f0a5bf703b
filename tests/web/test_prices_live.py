"""Prices on a live server: a price file that turns bad or disappears is a
logged warning and the last good table keeps serving, with nothing of the
file in any answer; token sums past what the store holds are a 422 naming the field."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from app.core import prices
from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app
from tests.factories import EXAMPLES, examples_client
from tests.servers import serve_in_thread

BIG = 2**53 - 1  # the most one model call may say


def _record(case_id: str, model_calls: list[dict[str, object]], trial: int = 0) -> dict[str, object]:
    rec = json.loads((EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()[0])
    return {**rec, "case_id": case_id, "trial": trial, "model_calls": model_calls}


def test_a_price_file_gone_bad_after_start_keeps_the_last_good_table(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    price_file = tmp_path / "secret-prices.yaml"
    price_file.write_text('date: "2026-02-01"\nmodels:\n  modelo-casa: {input: 1000, output: 2000}\n')
    monkeypatch.setenv(prices.ENV, str(price_file))
    with examples_client(db_url) as c:
        run = c.post("/api/runs", json={"name": "r", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")})
        rid = run.json()["id"]
        rec = _record("saldo-001", [{"model": "modelo-casa", "input_tokens": 1000, "output_tokens": 500}])
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [rec]}).status_code == 200
    with (
        serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base,
        httpx.Client(base_url=base) as h,
    ):

        def cost() -> object:
            r = h.get(f"/api/runs/{rid}/figures")
            assert r.status_code == 200, r.text
            return r.json()["usage"]["cost_usd"]

        good = cost()
        assert good == pytest.approx((1000 * 1000 + 500 * 2000) / 1e6)
        pages = [f"/runs/{rid}", "/", f"/api/runs/{rid}", "/api/runs", f"/api/runs/{rid}/figures"]
        for broken in ("models: [not, a, mapping\n", "date: x\nmodels:\n  m: {input: -1, output: 1}\n", None):
            if broken is None:
                price_file.unlink()
            else:
                price_file.write_text(broken)
            with caplog.at_level(logging.WARNING):
                for path in pages:
                    r = h.get(path)
                    assert r.status_code == 200, (path, r.status_code)
                    assert str(tmp_path) not in r.text and "secret-prices" not in r.text and "mapping" not in r.text
                assert cost() == good  # the last good table still prices the run
            assert any("secret-prices.yaml" in m and "last good" in m for m in caplog.messages), caplog.messages
            caplog.clear()
        price_file.write_text('date: "2026-03-01"\nmodels:\n  modelo-casa: {input: 2000, output: 2000}\n')
        assert cost() == pytest.approx((1000 * 2000 + 500 * 2000) / 1e6)  # a good file again: read again


def test_a_bad_price_file_from_the_start_serves_the_bundled_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("models: 3\n")
    monkeypatch.setenv(prices.ENV, str(bad))
    assert prices.current_prices().models == prices.bundled_prices().models


def test_token_sums_past_what_the_store_holds_are_422_naming_the_field(db_url: str) -> None:
    with examples_client(db_url, "v1") as c:
        rid = c.get("/api/runs").json()["data"][0]["id"]
        before = c.get(f"/api/runs/{rid}/trajectories").json()["count"]
        # one trajectory: 1,100 model calls of 2^53 - 1 input tokens add up past 2^63
        rec = _record("saldo-001", [{"model": "gpt-4o", "input_tokens": BIG}] * 1100, trial=999)
        r = c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [rec]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["field"] == "model_calls[1].input_tokens"
        # a run: each trajectory fits, their sum would not
        recs = [_record("saldo-001", [{"model": "gpt-4o", "output_tokens": BIG}], trial=1000 + i) for i in range(1100)]
        r = c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs})
        assert r.status_code == 422, r.text
        assert "output_tokens" in r.json()["error"] and "gpt-4o" in r.json()["error"]
        assert c.get(f"/api/runs/{rid}/trajectories").json()["count"] == before
        ok = c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs[:3]})
        assert ok.status_code == 200, ok.text
