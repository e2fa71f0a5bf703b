"""The HTML pages over a real database, checked with a parser: they render,
escape what traces supply, put figures in JSON blocks, and 404 properly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HTML = {"accept": "text/html"}


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None and self._in_script.get("type") == "application/json":
            self.scripts.append(data)


def parse(text: str) -> Collect:
    p = Collect()
    p.feed(text)
    return p


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
        rid = c.post("/api/runs", json={"name": "v1", "suite": doc}).json()["id"]
        recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
        evil = dict(
            recs[0],
            trial=99,
            answer="<script>alert(1)</script>",
            calls=[dict(recs[0]["calls"][0], observation='"><img src=x onerror=alert(2)>')],
        )
        c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [*recs, evil]})
        yield c


def test_pages_render_with_figures_as_json(client: TestClient) -> None:
    for path in ("/", "/runs/1", "/runs/1?failure=schema", "/trajectories/1", "/toolsets/atencion_cliente"):
        r = client.get(path, headers=HTML)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
    page = parse(client.get("/runs/1", headers=HTML).text)
    figures = [json.loads(s) for s in page.scripts]
    assert figures and all(f["data"][0]["type"] == "bar" for f in figures)  # outcome bars; the heatmap is a table
    plotly = [a["content"] for tag, a in page.tags if tag == "meta" and a.get("name") == "plotly"]
    assert len(plotly) == 1 and plotly[0] and plotly[0].startswith("/static/")
    assert client.get(plotly[0]).status_code == 200  # served by the app, no CDN


def test_untrusted_text_is_escaped(client: TestClient) -> None:
    tid = client.get("/api/runs/1/trajectories", params={"case_id": "saldo-001", "limit": 500}).json()["data"][-1]["id"]
    text = client.get(f"/trajectories/{tid}", headers=HTML).text
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not any(tag == "img" for tag, _ in parse(text).tags)


def test_filters_and_cells_narrow_the_list(client: TestClient) -> None:
    text = client.get("/runs/1", params={"expected": "buscar_pedido", "called": "buscar_producto"}, headers=HTML).text
    assert "4 shown by the filter" in text


def test_unknown_ids_are_404_pages_or_json(client: TestClient) -> None:
    r = client.get("/runs/987654", headers=HTML)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html") and "no run 987654" in r.text
    assert client.get("/trajectories/987654", headers=HTML).status_code == 404
    assert client.get("/toolsets/nope", headers=HTML).status_code == 404
    r = client.get("/api/runs/987654")
    assert r.status_code == 404 and r.json()["error"] == "no run 987654"


def test_odd_ids_and_names_never_500(client: TestClient) -> None:
    for path in ("/runs/99999999999999999999", "/trajectories/9223372036854775808", "/runs/0", "/compare?a=1&b=x"):
        r = client.get(path, headers=HTML)
        assert r.status_code in (404, 422), path
        assert r.headers["content-type"].startswith("text/html"), path
    # a toolset name with a slash in it still has working links
    suite = {
        "name": "slash",
        "toolset": {"name": "team/tools", "tools": [{"name": "t", "description": "d"}]},
        "cases": [{"id": "c", "question": "q"}],
    }
    assert client.post("/api/runs", json={"name": "slash", "suite": suite}).status_code == 201
    assert client.get("/toolsets/team/tools", headers=HTML).status_code == 200
    assert client.get("/api/toolsets/team/tools").json()["name"] == "team/tools"


def test_trajectory_pager_keeps_filters_and_size(client: TestClient) -> None:
    text = client.get("/runs/1", params={"failure": "selection", "limit": 5}, headers=HTML).text
    assert "failure=selection&amp;offset=5&amp;limit=5#trajectories" in text


def test_runs_list_shows_each_runs_pass_rate_and_pass_hat_k(client: TestClient) -> None:
    """saldo-003's one passing trial three times, and nota-001's three trials (two pass): 5 of 6 pass;
    pass^3 is the mean over both cases of C(c, 3) / C(3, 3): (1 + 0) / 2."""
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    saldo = next(r for r in recs if r["case_id"] == "saldo-003")
    nota = [r for r in recs if r["case_id"] == "nota-001"]
    doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
    rid = client.post("/api/runs", json={"name": "k3", "suite": doc}).json()["id"]
    trajs = [dict(saldo, trial=t) for t in (1, 2, 3)] + [dict(r, trial=t) for t, r in enumerate(nota, 1)]
    assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": trajs}).status_code < 300
    run = client.get(f"/api/runs/{rid}").json()
    assert (run["scored"], run["passed"], run["max_trials"]) == (6, 5, 3)
    assert run["pass_hat_k"] == {"1": 0.8333, "2": 0.6667, "3": 0.5}  # (1 + 1/3) / 2 at k=2
    text = client.get("/", headers=HTML).text
    row = text[text.index('aria-label="compare k3"') :]
    row = row[: row.index("</tr>")]
    assert "<b>83.3%</b> <small>5/6</small>" in row and "pass^3 0.50" in row
    v1 = text[text.index('aria-label="compare v1"') :]
    v1 = v1[: v1.index("</tr>")]
    # v1: 13 of its 36 trajectories pass and the hostile copy of saldo-001 fails; 7 trials of saldo-001, 3 pass
    assert "<b>35.1%</b> <small>13/37</small>" in v1 and "pass^7 0.00" in v1


def test_pages_count_calls_from_one_and_state_f5_over_the_order_checks(client: TestClient) -> None:
    """saldo-001 trial 2: a 503 at step 1 (0-based), its second call; F5 of v1: 2 of 26 order checks."""
    data = client.get("/api/runs/1/trajectories", params={"case_id": "saldo-001", "limit": 500}).json()["data"]
    tid = next(t["id"] for t in data if t["trial"] == 2 and t["fault"])
    assert "injected http_503 at call #2" in client.get(f"/trajectories/{tid}", headers=HTML).text
    run = client.get("/runs/1", params={"fault_kind": "http_503"}, headers=HTML).text
    assert "http_503 at call #2" in run and "@ call" not in run
    card = run[run.index("of the order checks") :]
    assert card.index("<b>7.7%</b> <small>2/26</small>") < card.index("</article>")
    row = client.get("/", headers=HTML).text
    row = row[row.index('aria-label="compare v1"') :]
    assert "<b>7.7%</b> <small>2/26</small>" in row[: row.index("</tr>")]  # the runs list's F5 cell, the same
    form = client.get("/", params={"suite": "s<1", "model": "nope"}, headers=HTML).text  # RunsFilters
    assert 'name="suite" value="s&lt;1"' in form and 'name="model" value="nope"' in form
    assert 'name="toolset_version" value=""' in form


def test_the_agents_exception_on_its_page_in_the_api_and_on_the_run(client: TestClient) -> None:
    """Two records of a run whose agent raised (one KeyError, escaped; one whose source said only that it
    raised): the trajectory page shows type, message and frames; the API has them; the run counts by type."""
    recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    raised = dict(
        recs[0],
        calls=[],
        answer="",
        stopped="agent_error",
        agent_error={
            "type": "KeyError",
            "message": "'<b>saldo</b>'",
            "traceback": ["agent.py:7 in agent: return t['saldo']"],
        },
    )
    unsaid = dict(recs[1], calls=[], answer="", stopped="agent_error")
    rid = client.post(
        "/api/runs", json={"name": "crashy", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")}
    ).json()["id"]
    assert client.post(f"/api/runs/{rid}/trajectories", json={"trajectories": [raised, unsaid]}).status_code == 200
    ids = [t["id"] for t in client.get(f"/api/runs/{rid}/trajectories").json()["data"]]
    api = client.get(f"/api/trajectories/{ids[0]}").json()
    assert api["agent_error"] == raised["agent_error"]
    assert client.get(f"/api/runs/{rid}/figures").json()["agent_errors"] == {"(not recorded)": 1, "KeyError": 1}
    page = client.get(f"/trajectories/{ids[0]}", headers=HTML).text
    section = page[page.index('id="agent-error"') : page.index("</section>", page.index('id="agent-error"'))]
    assert (
        'The agent raised <code>KeyError</code>: <span class="msg">&#39;&lt;b&gt;saldo&lt;/b&gt;&#39;</span>' in section
    )
    assert "the last 1 frame of its traceback" in section
    assert "agent.py:7 in agent: return t[&#39;saldo&#39;]" in section
    assert "the record says the agent raised, not what" in client.get(f"/trajectories/{ids[1]}", headers=HTML).text
    run = client.get(f"/runs/{rid}", headers=HTML).text
    line = run[run.index('id="agent-errors"') : run.index("</p>", run.index('id="agent-errors"'))]
    assert (
        "2 trajectories ended with the agent raising: <code>(not recorded)</code> 1 · <code>KeyError</code> 1" in line
    )
    exported = client.get(f"/api/runs/{rid}/trajectories.jsonl").text.splitlines()
    assert [json.loads(x).get("agent_error") for x in exported] == [raised["agent_error"], None]


def test_every_route_a_person_opens_answers_a_browser_with_a_page(db_url: str) -> None:
    """Not found, a bad parameter, a path no route has, and a defect (500, its text never shown): a page for
    a browser (also below a proxy's root path), JSON for the API and for clients that do not ask for HTML."""
    app = create_app(Settings(database_url=db_url, auto_migrate=False))

    def boom() -> None:
        raise RuntimeError("secret detail")

    app.add_api_route("/boom", boom)
    browser = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    with TestClient(app, raise_server_exceptions=False) as c:
        for path, status in (
            ("/runs/999", 404),
            ("/trajectories/999", 404),
            ("/toolsets/nope", 404),
            ("/compare?a=1&b=999", 404),
            ("/compare?a=1&b=x", 422),
            ("/runz", 404),
            ("/runs/1?limit=99999", 422),
            ("/boom", 500),
        ):
            r = c.get(path, headers=browser)
            assert (r.status_code, r.headers["content-type"].split(";")[0]) == (status, "text/html"), path
            assert "<h1>" in r.text and "secret detail" not in r.text, path
        assert "something went wrong on the server" in c.get("/boom", headers=browser).text
        for path in ("/api/runs/999", "/runs/999", "/boom"):  # the API, and a client that asks for no page
            r = c.get(path, headers=browser if path.startswith("/api") else {})
            assert r.headers["content-type"] == "application/json" and "secret" not in r.text, path
    with TestClient(app, root_path="/toollens") as c:  # a proxy that leaves its prefix in the path
        assert c.get("/toollens/api/runs/999", headers=browser).headers["content-type"] == "application/json"
        assert c.get("/toollens/runs/999", headers=browser).headers["content-type"].startswith("text/html")
