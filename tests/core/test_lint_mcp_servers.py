"""The linter on real toolsets: the tool lists of the official MCP reference
servers (``mcp-server-git``, ``mcp-server-time``, ``mcp-server-fetch`` from
PyPI, saved verbatim under ``tests/fixtures/mcp``). Every tool of a server
shares its prefix (``git_``): that prefix must count for nothing, and the
pairs that really read alike must come first."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from app.cli import cli
from app.core.advise.lint import lint_pairs, lint_toolset, similarities
from app.core.suites.suite import load_toolset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mcp"
GIT = FIXTURES / "mcp-server-git.json"
TIME = FIXTURES / "mcp-server-time.json"
FETCH = FIXTURES / "mcp-server-fetch.json"
runner = CliRunner()

# Pairs at or above the look-alike threshold (0.3), by hand. Name words are weighted ln(N/df) over the 12 names:
# "git" is in all 12 (ln 1 = 0), "diff" in 3 (ln 4 = 1.386), "branch" in 2 (ln 6 = 1.792), "staged", "unstaged",
# "create" in 1 (ln 12 = 2.485). So git_branch / git_create_branch = 1.792 / (1.792 + 2.485) = 0.419 and
# git_diff / git_diff_staged = 1.386 / (1.386 + 2.485) = 0.358; the other pairs read alike by their descriptions.
GIT_LOOKALIKES = {
    ("git_diff_staged", "git_diff_unstaged"): 0.513,  # "Shows changes … staged": descriptions
    ("git_branch", "git_create_branch"): 0.419,
    ("git_diff_staged", "git_reset"): 0.371,  # "Unstages all staged changes": descriptions
    ("git_diff", "git_diff_staged"): 0.358,
    ("git_diff", "git_diff_unstaged"): 0.358,
    ("git_diff_staged", "git_log"): 0.355,  # "Shows … commit": descriptions
    ("git_diff", "git_log"): 0.306,
}


def test_a_prefix_every_tool_shares_counts_for_nothing() -> None:
    sims = similarities(load_toolset(GIT))
    assert sims[("git_add", "git_commit")].name == 0.0  # only "git" in common
    assert sims[("git_branch", "git_create_branch")].name == 0.419
    assert sims[("git_diff", "git_diff_staged")].name == 0.358
    looked = {pair: s.score for pair, s in sims.items() if s.score >= 0.3}
    assert looked == GIT_LOOKALIKES
    # time's two tools share "time" (both names, ln(2/2) = 0): below the threshold, no finding
    time_sims = similarities(load_toolset(TIME))
    assert time_sims[("convert_time", "get_current_time")].name == 0.0
    assert lint_toolset(load_toolset(TIME)) == []


def test_git_findings_by_hand() -> None:
    found = lint_toolset(load_toolset(GIT))
    assert [(f.rule, f.tool, f.related) for f in found if f.rule == "similar_pair"] == [
        ("similar_pair", "git_diff_staged", ("git_diff_unstaged",))
    ]
    # each tool with look-alikes names exactly those at or above 0.3, closest first
    negative = {f.tool: f.related for f in found if f.rule == "no_negative_delimitation"}
    assert negative == {
        "git_diff_staged": ("git_diff_unstaged", "git_reset", "git_diff", "git_log"),
        "git_diff_unstaged": ("git_diff_staged", "git_diff"),
        "git_diff": ("git_diff_staged", "git_diff_unstaged", "git_log"),
        "git_branch": ("git_create_branch",),
        "git_create_branch": ("git_branch",),
        "git_reset": ("git_diff_staged",),
        "git_log": ("git_diff_staged", "git_diff"),
    }
    # ranked by score: the diff trio and the branch pair lead, grouped per pair
    ranked = [((p.a, p.b), p.score) for p in lint_pairs(found)]
    assert ranked == [*sorted(GIT_LOOKALIKES.items(), key=lambda kv: (-kv[1], kv[0])), (("git_log", "git_show"), 0.0)]
    # before any run, two pairs a model will take for each other: names that differ in one word, one of whose
    # descriptions never says it ("unstaged"), and first clauses of one shape ("Shows the commit …")
    assert {(f.tool, f.related, tuple(sorted(f.detail))) for f in found if f.rule == "lookalike_pair"} == {
        ("git_diff_staged", ("git_diff_unstaged",), ("differ", "similarity", "unsaid")),
        ("git_log", ("git_show",), ("shape", "similarity")),
    }
    assert [(f.rule, f.tool) for f in lint_pairs(found)[0].findings] == [
        ("similar_pair", "git_diff_staged"),
        ("no_negative_delimitation", "git_diff_staged"),
        ("no_negative_delimitation", "git_diff_unstaged"),
        ("lookalike_pair", "git_diff_staged"),
    ]
    # git_reset is the one tool the server marks destructive ("Unstages all staged changes": no guard stated)
    assert [f.tool for f in found if f.rule == "unguarded_destructive"] == ["git_reset"]
    assert {f.tool for f in found if f.rule == "argument_format"} == {
        "git_diff",
        "git_diff_staged",
        "git_diff_unstaged",
        "git_log",
    }
    assert len(found) == 15


def test_thresholds_are_honoured_exactly() -> None:
    git = load_toolset(GIT)
    off = lint_toolset(git, similar=1.0, lookalike=1.0)  # no pair reads identically: no pair finding at all
    assert {f.rule for f in off} == {"argument_format", "unguarded_destructive"}
    at = lint_toolset(git, lookalike=0.419)  # at the threshold counts, below does not
    assert {f.tool for f in at if f.rule == "no_negative_delimitation"} == {
        "git_diff_staged",
        "git_diff_unstaged",
        "git_branch",
        "git_create_branch",
    }
    assert [f.tool for f in lint_toolset(git, similar=0.513) if f.rule == "similar_pair"] == ["git_diff_staged"]
    assert [f for f in lint_toolset(git, similar=0.514) if f.rule == "similar_pair"] == []


def test_cli_groups_findings_per_pair(tmp_path: Path) -> None:
    r = runner.invoke(cli, ["lint", str(GIT)])
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0] == "mcp-server-git 2026.10.19 " + load_toolset(GIT).version + ": 12 tools, 15 findings"
    assert lines[1] == "git_diff_staged ~ git_diff_unstaged  (similarity 0.51)"
    assert lines[2].startswith("  similar_pair  git_diff_staged and git_diff_unstaged read alike")
    assert lines[3].startswith(
        "  no_negative_delimitation  git_diff_staged never says what it is not for: "
        'add "not for X: use git_diff_unstaged"'
    )
    assert lines[5].startswith(
        "  lookalike_pair  git_diff_staged and git_diff_unstaged: names that differ only in "
        "'staged' / 'unstaged', and git_diff_unstaged does not say it"
    )
    assert lines[6] == "git_branch ~ git_create_branch  (similarity 0.42)"
    assert [x for x in lines if x.startswith("unguarded_destructive")] == [
        x for x in lines if x.startswith("unguarded_destructive  git_reset is destructive")
    ]
    # --lookalike 1.0 turns the look-alike rule off
    r = runner.invoke(cli, ["lint", str(GIT), "--lookalike", "1.0", "--json"])
    assert json.loads(r.stdout)["counts"] == {
        "similar_pair": 1,
        "no_negative_delimitation": 0,
        "argument_format": 4,
        "missing_precondition": 0,
        "unguarded_destructive": 1,
        "lookalike_pair": 0,
    }
    r = runner.invoke(cli, ["lint", str(FETCH), "--json"])
    assert r.exit_code == 1 and [f["field"] for f in json.loads(r.stdout)["findings"]] == ["max_length", "start_index"]


def test_destructive_hint_and_its_guard() -> None:
    from app.core.suites.tools import Toolset

    def lint_one(description: str, annotations: dict[str, bool] | None) -> list[str]:
        tools = Toolset.from_list(
            [
                {
                    "name": "drop_table",
                    "description": description,
                    "annotations": annotations,
                    "inputSchema": {"type": "object", "properties": {}},
                }
            ]
        )
        return [f.rule for f in lint_toolset(tools)]

    assert lint_one("Drops the table.", {"destructiveHint": True}) == ["unguarded_destructive"]
    assert lint_one("Drops the table.", {"readOnlyHint": False}) == ["unguarded_destructive"]  # the spec's default
    assert lint_one("Drops the table.", {"readOnlyHint": True}) == []
    assert lint_one("Drops the table.", {"readOnlyHint": False, "destructiveHint": False}) == []
    assert lint_one("Drops the table.", None) == []  # no hints: nothing claimed
    assert lint_one("Drops the table. Confirm with the user first.", {"destructiveHint": True}) == []
    assert lint_one("Borra la tabla. Solo si el usuario lo pidió.", {"destructiveHint": True}) == []


def test_run_page_marks_destructive_tools(db_url: str) -> None:
    """A run against the git server's snapshot: the page context lists git_reset as destructive, the page
    shows it, and the lint pairs are the ranked pairs above (real HTTP through the app factory)."""
    from fastapi.testclient import TestClient

    from app.settings import Settings
    from app.web.app import create_app

    toolset = json.loads(GIT.read_text())
    suite = {
        "name": "git-suite",
        "toolset": toolset,
        "cases": [
            {
                "id": "status-1",
                "question": "What changed?",
                "expected_calls": [{"name": "git_status", "arguments": {"repo_path": "/repo"}}],
            }
        ],
    }
    record = {
        "case_id": "status-1",
        "trial": 0,
        "question": "What changed?",
        "answer": "",
        "calls": [{"name": "git_diff_staged", "arguments": {"repo_path": "/repo"}, "observation": ""}],
    }
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        created = c.post("/api/runs", json={"name": "git", "suite": suite})
        assert created.status_code == 201, created.text
        rid = created.json()["id"]
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [record]}).status_code == 200
        data = c.get(f"/api/runs/{rid}/lint").json()
        assert data["destructive"] == ["git_reset"]
        pairs = [(p["a"], p["b"], p["a_called_as_b"], p["b_called_as_a"]) for p in data["pairs"]]
        # the confused pair (expected git_status, called git_diff_staged) first, with no finding; then by score
        assert pairs[0] == ("git_diff_staged", "git_status", 0, 1) and data["pairs"][0]["findings"] == []
        assert [(a, b) for a, b, _, _ in pairs[1:]] == [
            *(pair for pair, _ in sorted(GIT_LOOKALIKES.items(), key=lambda kv: (-kv[1], kv[0]))),
            ("git_log", "git_show"),
        ]
        html = c.get(f"/runs/{rid}", headers={"accept": "text/html"}).text
        assert 'id="destructive-tools"' in html and "git_reset" in html.split('id="destructive-tools"')[1][:400]
