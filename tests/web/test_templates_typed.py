"""Templates only display: none reaches into a raw dict. The page's context and the API's
view models give every value a typed shape (attributes), so no template calls ``.get(``
and none subscripts a value by a key it holds; a literal index or slice (``[0]``,
``[:8]``) of a list or a string, and a loop over a dict's items, stay allowed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jinja2
import pytest
from fastapi.testclient import TestClient

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
EXAMPLES = TEMPLATES.parent / "examples"
TAG = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)  # the Jinja parts of a template
STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
DICT_GET = re.compile(r"\.get\(")
KEYED = re.compile(r"[\w.]+\[\s*[A-Za-z_][\w.]*\s*\]")  # x[key], x[c.key]: a lookup by a key it holds


def reaches(text: str) -> list[str]:
    """The dict reaches in a template's Jinja tags (string literals left out): each as written."""
    found = []
    for tag in TAG.findall(text):
        code = STRING.sub('""', tag)
        found += [m.group(0) for m in DICT_GET.finditer(code)]
        found += [m.group(0) for m in KEYED.finditer(code)]
    return found


def test_the_scan_sees_a_get_and_a_keyed_lookup_and_lets_indexes_slices_and_loops_pass() -> None:
    assert reaches('{{ m.get("model", "—") }} {% set c = page.reactions[k].get(r) %}') == [
        ".get(",
        ".get(",
        "page.reactions[k]",
    ]
    assert reaches('{{ v.hash[:8] }} {{ ps.hat_k[0][1] }} {% for k, v in f.items() %}{{ "a[b]" }}{% endfor %}') == []
    assert reaches('<input name="calls[i]"> {{ x }}') == []  # HTML outside the tags is not code


def test_no_template_reaches_into_a_raw_dict() -> None:
    names = sorted(p.name for p in TEMPLATES.glob("*.html"))
    assert {"run.html", "trajectory.html", "compare.html", "toolset.html"} <= set(names)
    assert {name: r for name in names if (r := reaches((TEMPLATES / name).read_text()))} == {}


def test_no_page_reads_an_attribute_of_a_raw_dict(
    _sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the scan cannot see (``t.usage.requests`` on a dict): every read of an attribute
    Jinja makes while the pages of a demo run render (faults, mismatches, schema errors,
    delays, model requests, a pair) is recorded, and none is a dict's."""
    path = tmp_path / "t.db"
    shutil.copyfile(_sqlite_template, path)
    seen: list[str] = []
    plain = jinja2.Environment.getattr

    def getattr_(env: jinja2.Environment, obj: Any, attribute: str) -> Any:
        if isinstance(obj, dict) and not hasattr(dict, attribute):
            seen.append(attribute)
        return plain(env, obj, attribute)

    monkeypatch.setattr(jinja2.Environment, "getattr", getattr_)
    with TestClient(create_app(Settings(database_url=f"sqlite:///{path}", auto_migrate=False))) as c:
        doc = load_suite_document(EXAMPLES / "suite_v1.yaml")
        rid = c.post("/api/runs", json={"name": "v1", "suite": doc}).json()["id"]
        recs = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
        for i, r in enumerate(recs):
            r["model_calls"] = [{"model": "gpt-4o-2024-08-06", "input_tokens": 100 + i, "output_tokens": 20}]
            for call in r["calls"]:
                call["latency_ms"] = 10.0 + i
                if call.get("error"):
                    call["error"]["delay_ms"] = 5.0
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
        ids = [t["id"] for t in c.get(f"/api/runs/{rid}/trajectories", params={"limit": 100}).json()["data"]]
        pages = ["/", f"/runs/{rid}", *(f"/trajectories/{t}" for t in ids)]
        pages += [f"/compare/trajectories?a={ids[0]}&b={ids[1]}", "/toolsets/atencion_cliente"]
        for url in pages:
            assert c.get(url, headers={"accept": "text/html"}).status_code == 200, url
    assert len(ids) == len(recs) and seen == []
