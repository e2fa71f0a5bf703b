"""Templates only display: none reaches into a raw dict. The page's context and the API's
view models give every value a typed shape (attributes), so no template calls ``.get(``
and none subscripts a value by a key it holds; a literal index or slice (``[0]``,
``[:8]``) of a list or a string, and a loop over a dict's items, stay allowed."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
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
