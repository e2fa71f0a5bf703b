"""Issue 46: an Inspect log is bounded by what it builds, not only by its
bytes. The issue's hostile files are built here (tests/hostile_inspect.py),
imported by a fresh ``toollens`` process, and that process's peak memory
(``ru_maxrss``) is checked: an attachment referenced 600 times, a 250 MiB
member of ``{},{},…`` (and of 20-digit integers) in an archive of a few
hundred KB, and a ``.json`` log read as a stream."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.core.errors import InvalidTrajectory
from app.importers import Options
from app.importers.inspect_log import convert
from app.settings import SettingsError
from tests.hostile_inspect import attachment_bomb, many_samples, peak_import, values_bomb
from tests.importers.test_inspect_log import eval_log, header, new_sample

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def test_an_attachment_referenced_600_times_is_refused_by_name(tmp_path: Path) -> None:
    path = attachment_bomb(tmp_path / "refs.eval")  # 1 MiB referenced 600 times: 600 MiB once resolved
    assert path.stat().st_size < 10_000
    db = tmp_path / "t.db"
    base, peak, code, err = peak_import(["import", str(path), "--format", "inspect", "--run", "r", "--db", str(db)])
    assert code != 0
    assert "sample 's0' epoch 1: attachment 'big'" in err
    assert "more than 16777216 characters (TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS" in err
    assert peak - base < 60, (base, peak)  # was 602 MB of SQLite and 1.86 GB to show it
    assert not db.exists() or db.stat().st_size < 1 << 20


def test_the_import_budget_counts_every_sample_converted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = attachment_bomb(tmp_path / "five.eval", refs=2, size=1000, samples=5)  # 2,000 characters a sample
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS_TOTAL", "4500")
    got = list(convert(path, Options(), use_inspect_ai=False).records())
    kept = [t.case_id for _, t in got if not isinstance(t, InvalidTrajectory)]
    refused = [t for _, t in got if isinstance(t, InvalidTrajectory)]
    assert kept == ["s0", "s1"]  # 4,000 characters; a third sample would make 6,000
    assert len(refused) == 3
    assert (
        "sample 's2' epoch 1: attachment 'big': the log's attachment references expand to more than 4500 "
        "characters (TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS_TOTAL" in str(refused[0])
    )
    # within the budgets every reference is resolved
    monkeypatch.delenv("TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS_TOTAL")
    got = list(convert(path, Options(), use_inspect_ai=False).records())
    assert [c.observation for _, t in got for c in t.calls] == ["y" * 1000] * 10  # type: ignore[union-attr]


@pytest.mark.parametrize("item", [b"{},", b"12345678901234567890,"], ids=["empty-objects", "20-digit-integers"])
def test_a_member_of_a_quarter_gigabyte_of_tiny_values_is_refused(item: bytes, tmp_path: Path) -> None:
    path = values_bomb(tmp_path / "values.eval", item=item)  # 250 MiB inflated, under the 256 MiB member bound
    assert path.stat().st_size < 1 << 20
    base, peak, code, err = peak_import(
        ["import", str(path), "--format", "inspect", "--run", "r", "--db", str(tmp_path / "t.db")]
    )
    assert code != 0
    assert "samples/s_epoch_1.json: would build more than 10000000 JSON values (TOOLLENS_IMPORT_MAX_JSON_VALUES)" in err
    # refused while it is inflated, at 10 million values: ~30 MB of `{},`, ~210 MB of integers (was 8.1 / 7.2 GB)
    assert peak - base < (60 if item == b"{}," else 300), (base, peak)


def test_the_bounds_are_set_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = eval_log(tmp_path / "new.eval", 8)
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_JSON_VALUES", "100")  # a real sample holds a few hundred
    with pytest.raises(
        InvalidTrajectory,
        match=r"samples/task-1_epoch_1\.json: would build more than 100 JSON "
        r"values \(TOOLLENS_IMPORT_MAX_JSON_VALUES\)",
    ):
        convert(path, Options(), use_inspect_ai=False)
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_JSON_VALUES", "lots")
    with pytest.raises(SettingsError, match="TOOLLENS_IMPORT_MAX_JSON_VALUES"):
        convert(path, Options(), use_inspect_ai=False)


def test_a_json_log_is_read_as_a_stream(tmp_path: Path) -> None:
    path = many_samples(tmp_path / "many.json", 600, pad=100_000)  # 60 MB of samples
    assert path.stat().st_size > 60_000_000
    base, peak, code, err = peak_import(["convert", "--from", "inspect", str(path), "--out", str(tmp_path / "o")])
    assert code == 0, err
    assert peak - base < 45, (base, peak)  # read whole, the file alone held 60 MB (and its objects as much again)
    lines = (tmp_path / "o" / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["case_id"] for line in lines[:3]] == ["s0", "s1", "s2"] and len(lines) == 600


def test_a_json_log_in_another_order_is_read_in_the_datasets_order(tmp_path: Path) -> None:
    doc = {
        **header(2, ["b", "a"], 2),
        "samples": [{**new_sample(e, 1), "id": sid} for sid, e in (("a", 2), ("a", 1), ("b", 2), ("b", 1))],
    }
    (tmp_path / "log.json").write_text("\ufeff" + json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    got = [t for _, t in convert(tmp_path / "log.json", Options(), use_inspect_ai=False).records()]
    assert [(t.case_id, t.trial) for t in got] == [("b", 0), ("b", 1), ("a", 0), ("a", 1)]  # type: ignore[union-attr]


def test_a_json_log_that_is_cut_short_or_too_big_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {**header(2, ["task-1"], 2), "samples": [new_sample(1, 1), new_sample(2, 1)]}
    text = json.dumps(doc)
    (tmp_path / "cut.json").write_text(text[: len(text) - 2000])
    with pytest.raises(InvalidTrajectory, match="truncated file"):
        convert(tmp_path / "cut.json", Options(), use_inspect_ai=False)
    (tmp_path / "ok.json").write_text(text)
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_MEMBER_BYTES", "1000")  # a sample is some 4 KB
    with pytest.raises(
        InvalidTrajectory,
        match=r"samples\[\] at byte \d+ is larger than 1000 characters "
        r"\(TOOLLENS_IMPORT_MAX_MEMBER_BYTES\)",
    ):
        convert(tmp_path / "ok.json", Options(), use_inspect_ai=False)
