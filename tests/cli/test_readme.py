"""The README's commands, run top to bottom in a fresh copy of the repository.

Every ``sh`` block of README.md is run line by line with the installed
``toollens``; a line ending in ``# exits N`` must exit N, any other 0. The two
``make`` commands are CI's own (``.ci/run`` runs ``make test``; ``make demo`` is
``toollens demo``, covered by tests/cli/test_demo.py). Whatever the commands write
must be git-ignored: a user's checkout stays clean.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.resources import missing

ROOT = Path(__file__).resolve().parents[2]
TOOLLENS = Path(sys.executable).with_name("toollens")


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_leads_with_the_two_commands() -> None:
    assert readme_commands()[:2] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_readme_command_works_on_a_fresh_copy(tmp_path: Path) -> None:
    if shutil.which("git") is None or not TOOLLENS.exists():
        missing(
            "git and the installed toollens command",
            "apt-get install git, and pip install -e '.[dev]' (which installs toollens beside this Python)",
        )
    repo = tmp_path / "toollens"
    for name in ("examples", "docs"):
        shutil.copytree(ROOT / name, repo / name)
    for name in ("README.md", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fresh"], check=True)
    for line in readme_commands()[2:]:
        expected = re.search(r"#\s*exits (\d)", line)
        args = shlex.split(line, comments=True)
        assert args[0] == ".venv/bin/toollens", line
        done = subprocess.run([str(TOOLLENS), *args[1:]], cwd=repo, capture_output=True, text=True, timeout=300)
        assert done.returncode == (int(expected.group(1)) if expected else 0), (
            line,
            done.stdout[-2000:],
            done.stderr[-2000:],
        )
    # the gate example shows a real difference: the simulated agent reads the descriptions
    changes = [float(c) for c in re.findall(r"\| ([+-]\d+\.\d) pts \|", (repo / "gate.md").read_text())]
    assert len(changes) >= 5 and sum(c < -2.0 for c in changes) >= 2, changes
    status = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=all"], capture_output=True, text=True, check=True
    ).stdout
    assert status == "", f"the README's commands left files git does not ignore:\n{status}"


def test_the_product_points_at_no_document_outside_the_repository() -> None:
    """The formats and rules are written in docs/; nothing a user reads refers to a team's spec."""
    found = []
    files = [ROOT / "README.md", ROOT / "examples" / "README.md"]
    for folder, pattern in (("app", "*.py"), ("templates", "*.html"), ("static", "*"), ("docs", "*.md")):
        files += [p for p in (ROOT / folder).rglob(pattern) if p.is_file() and p.suffix != ".png"]
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [
            f"{path.relative_to(ROOT)}: {word}"
            for word in ("SPEC §", "SPEC rules", "SPEC.md", "../shared")
            if word in text
        ]
    assert found == []
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    owned = {"docs/dashboard.md", "docs/security.md", "docs/instrumentations.md"}  # written with other issues
    assert [link for link in links if not (ROOT / link).exists() and link not in owned] == []
