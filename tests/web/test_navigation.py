"""Moving around: the header's Runs · Toolsets · Compare, a breadcrumb on
every page, the toolsets list, version selectors by hash, label or numeric
id, and F5 on the runs list with its denominator. Real HTTP, both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.factories import examples_client

HTML = {"accept": "text/html"}
PAGES = (
    "/",
    "/runs/1",
    "/trajectories/1",
    "/compare",
    "/compare?a=1&b=2",
    "/compare/trajectories?a=1&b=40",
    "/toolsets",
    "/toolsets/atencion_cliente",
    "/runs/4242",
)


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "banca-v1", "banca-v2") as c:
        yield c


def test_every_page_has_the_header_and_a_breadcrumb(client: TestClient) -> None:
    for path in PAGES:
        text = client.get(path, headers=HTML).text
        nav = re.search(r'<nav aria-label="main"[^>]*>(.*?)</nav>', text, re.S)
        assert nav is not None, path
        assert re.findall(r'href="([^"]+)">([^<]+)</a>', nav.group(1)) == [
            ("/", "Runs"),
            ("/toolsets", "Toolsets"),
            ("/compare", "Compare"),
        ], path
        assert re.search(r'<p class="crumbs">', text), path
    crumbs = re.search(r'<p class="crumbs">(.*?)</p>', client.get("/trajectories/1", headers=HTML).text, re.S)
    assert crumbs is not None
    words = re.sub(r"<[^>]+>", "", crumbs.group(1)).split()
    assert words == ["Runs", "›", "banca-v1", "›", "saldo-001", "·", "trial", "0", "next", "failing", "→"]
    pair = client.get("/compare/trajectories?a=1&b=40", headers=HTML).text
    assert 'href="/compare?a=1&amp;b=2">Compare</a>' in pair  # back to the comparison


def test_toolsets_list(client: TestClient) -> None:
    text = client.get("/toolsets", headers=HTML).text
    row = re.search(
        r'<tr><th scope="row"><a href="/toolsets/atencion_cliente">atencion_cliente</a></th>(.*?)</tr>', text, re.S
    )
    assert row is not None
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", row.group(1), re.S)]
    assert cells == ["v1 · v2", "7", "2"]  # two versions, 7 tools in the newest, 2 runs


def test_version_selectors_take_hash_label_or_numeric_id(client: TestClient) -> None:
    versions = client.get("/api/toolsets/atencion_cliente").json()["versions"]
    (i1, h1), (i2, h2) = [(v["id"], v["hash"]) for v in versions]
    for a, b in ((h1, h2), ("v1", "v2"), (str(i1), str(i2)), (h1[:0] + str(i1), "v2")):
        r = client.get("/toolsets/atencion_cliente", params={"a": a, "b": b}, headers=HTML)
        assert r.status_code == 200, (a, b)
        assert f'<option value="{h1}" selected>' in r.text and f'<option value="{h2}" selected>' in r.text
    assert client.get("/toolsets/atencion_cliente", params={"a": "999999"}, headers=HTML).status_code == 404
    api = client.get("/api/toolsets/atencion_cliente/diff", params={"a": str(i1), "b": "v2"})
    assert api.status_code == 200 and (api.json()["a"], api.json()["b"]) == (h1, h2)


def test_compare_without_runs_offers_a_picker(client: TestClient) -> None:
    text = client.get("/compare", headers=HTML).text
    assert text.count('<option value="1"') == 2 and 'action="/compare"' in text
    assert client.get("/compare?a=1&b=x", headers=HTML).status_code == 422


def test_runs_list_f5_has_a_denominator(client: TestClient) -> None:
    text = client.get("/", headers=HTML).text
    v1 = re.search(r'<tr>\s*<td><input[^>]*aria-label="compare banca-v1">.*?</tr>', text, re.S)
    assert v1 is not None
    # banca v1: 2 violations (verificar_compra before emitir_nota_credito, 2 of its 8 checks) of the 26
    # order checks over all the suite's dependency pairs (a pair is checked where its second call succeeded:
    # two of the 28 calls that used to be checked failed)
    assert "<b>7.7%</b> <small>2/26</small>" in v1.group(0)
    checked = client.get("/api/runs/1/figures").json()["dependency_violations"]
    assert [(d["count"], d["checked"]) for d in checked] == [(2, 8)]
