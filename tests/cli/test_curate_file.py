"""`toollens curate --into` and the user's file: a kill -9 at any moment
leaves the old file or the new one; every byte already there stays; links
only when asked; the size limit; one-line errors for odd shapes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from app.cli import cli
from app.core.suites.suite import MAX_SUITE_BYTES, load_suite
from tests.factories import EXAMPLES

TOOLLENS = str(Path(sys.executable).with_name("toollens"))
runner = CliRunner()


@pytest.fixture()
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 't.db'}"
    r = runner.invoke(
        cli,
        [
            "import",
            str(EXAMPLES / "trajectories_v1.jsonl"),
            "--suite",
            str(EXAMPLES / "suite_v1.yaml"),
            "--run",
            "v1",
            "--db",
            url,
        ],
    )
    assert r.exit_code == 0, r.output
    (tmp_path / "toolset_v1.yaml").write_text((EXAMPLES / "toolset_v1.yaml").read_text())
    return url


def curate(db: str, into: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            TOOLLENS,
            "curate",
            "v1",
            "--where",
            "case=saldo-001",
            "--limit",
            "2",
            "--into",
            str(into),
            "--db",
            db,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


def test_crlf_comments_and_a_rerun_keep_every_byte(db: str, tmp_path: Path) -> None:
    mine = tmp_path / "suite.yaml"
    old = (EXAMPLES / "suite_v1.yaml").read_text().replace("\n", "\r\n").encode()
    mine.write_bytes(old)
    done = curate(db, mine)
    assert done.returncode == 0, done.stderr
    new = mine.read_bytes()
    assert new.startswith(old) and b"saldo-001-1" in new[len(old) :]
    assert new.count(b"\n") == new.count(b"\r\n")  # the added lines in the file's own line endings
    assert [c.id for c in load_suite(mine).cases][-2:] == ["saldo-001-1", "saldo-001-2"]
    stamp = mine.stat().st_mtime_ns
    again = curate(db, mine)  # nothing new: the file is not even written
    assert again.returncode == 0 and "0 cases" in again.stderr and "(2 in the file already)" in again.stderr
    assert mine.read_bytes() == new and mine.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml", "t.db", "toolset_v1.yaml"]


def test_cases_not_the_last_key_are_inserted_after_the_last_case(db: str, tmp_path: Path) -> None:
    text = (EXAMPLES / "suite_v1.yaml").read_text()
    cases = text.split("\ncases:\n")[1]
    mine = tmp_path / "suite.yaml"
    mine.write_text(
        "name: mine\ntoolset: toolset_v1.yaml\n# the cases\ncases:\n"
        + cases
        + '# kept: the settings after the cases\ngive_up_phrases:\n  - "no puedo"\n'
    )
    old = mine.read_text()
    assert curate(db, mine).returncode == 0
    new = mine.read_text()
    at = old.index("# kept: the settings")
    assert new.startswith(old[:at]) and new.endswith(old[at:])
    doc = yaml.safe_load(new)
    assert doc["give_up_phrases"] == ["no puedo"] and [c["id"] for c in doc["cases"]][-2:] == [
        "saldo-001-1",
        "saldo-001-2",
    ]


def test_symlinks_only_when_asked_and_a_dangling_one_never_creates_its_target(db: str, tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text((EXAMPLES / "suite_v1.yaml").read_text())
    before = real.read_bytes()
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert "is a symbolic link: give --follow-symlinks" in _error_line(curate(db, link))
    assert real.read_bytes() == before
    done = curate(db, link, "--follow-symlinks")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and real.read_bytes().startswith(before) and len(real.read_bytes()) > len(before)
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    for extra in ((), ("--follow-symlinks",)):
        _error_line(curate(db, dangling, *extra))
        assert not (tmp_path / "nowhere.yaml").exists()


def test_a_result_past_the_size_limit_is_refused_and_the_file_kept(db: str, tmp_path: Path) -> None:
    mine = tmp_path / "suite.yaml"
    text = (EXAMPLES / "suite_v1.yaml").read_text()
    pad = "x" * (1 << 20)
    big = [f"  - id: big{i}\n    question: {pad}\n    expected_calls: []\n" for i in range(30)]
    mine.write_text(text + "".join(big))
    size = mine.stat().st_size
    assert size < MAX_SUITE_BYTES
    with mine.open("a") as fh:  # 300 bytes short of the limit: two cases more do not fit
        fh.write("#" * (MAX_SUITE_BYTES - size - 300) + "\n")
    before = mine.read_bytes()
    assert "would be larger than 33554432 bytes" in _error_line(curate(db, mine))
    assert mine.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("- id: a\n  question: q\n", "holds a list at the top"),
        (
            "name: s\ntoolset: toolset_v1.yaml\ncases:\n  - id: a\n    question: q\n...\n",
            "ends its YAML document with `...`",
        ),
        ("", "is empty"),
        ("just words\n", "holds a str at the top"),
        ("name: s\ntoolset: toolset_v1.yaml\ncases: 3\n", "its cases are a int, not a list"),
        ("name: s\n---\nname: t\n", "cannot parse"),
    ],
)
def test_odd_shapes_are_one_line_errors_and_the_file_is_kept(db: str, tmp_path: Path, content: str, says: str) -> None:
    mine = tmp_path / "odd.yaml"
    mine.write_text(content)
    assert says in _error_line(curate(db, mine))
    assert mine.read_text() == content


def _kill_when_touched(db: str, into: Path, old: bytes) -> None:
    """Run curate and SIGKILL it the moment anything in the folder changes."""
    folder = into.parent
    names = sorted(os.listdir(folder))
    stat = into.stat()
    proc = subprocess.Popen(
        [TOOLLENS, "curate", "v1", "--where", "case=saldo-001", "--limit", "2", "--into", str(into), "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            now = into.stat()
            if sorted(os.listdir(folder)) != names or (now.st_size, now.st_mtime_ns) != (
                stat.st_size,
                stat.st_mtime_ns,
            ):
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        proc.wait(30)


def test_a_kill_9_at_any_moment_leaves_the_old_file_or_the_new_one(db: str, tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()  # away from the database's files, which change as it runs
    (tmp_path / "files" / "toolset_v1.yaml").write_text((EXAMPLES / "toolset_v1.yaml").read_text())
    into = tmp_path / "files" / "big.yaml"
    text = (EXAMPLES / "suite_v1.yaml").read_text()
    case = '  - id: pad{i}\n    question: "' + "y" * 2000 + '"\n    expected_calls: []\n'
    old = (text + "".join(case.format(i=i) for i in range(3000))).encode()  # about 6 MB
    into.write_bytes(old)
    start = time.monotonic()
    assert curate(db, into).returncode == 0
    took = time.monotonic() - start
    new = into.read_bytes()
    assert new != old and new.startswith(old)
    for _ in range(2):  # killed the moment the write begins (a temporary file appears, or the file changes)
        into.write_bytes(old)
        _kill_when_touched(db, into, old)
        assert into.read_bytes() in (old, new)
    for k in range(6):  # and at moments spread over the whole run
        into.write_bytes(old)
        proc = subprocess.Popen(
            [TOOLLENS, "curate", "v1", "--where", "case=saldo-001", "--limit", "2", "--into", str(into), "--db", db],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(took * (k + 1) / 6)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert into.read_bytes() in (old, new), k
