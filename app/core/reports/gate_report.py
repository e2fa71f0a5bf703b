"""The gate's two outputs: a Markdown summary for a pull-request comment and
JUnit XML for CI test reports. Case ids and run names come from agents and
traces: they are escaped for each format."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from app.core.reports.gate import USAGE_TOLERATED, CaseRef, FamilyVerdict, GateResult
from app.core.reports.wording import fault_key_text, fraction

MAX_LISTED = 50
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~-])")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def md(text: object, limit: int = 200) -> str:
    """Text made inert in Markdown (one line, special characters escaped,
    ``@mentions`` broken with a zero-width joiner so nobody is notified)."""
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", s).replace("&", "&amp;").replace("@", "@\u200d")


def _ratio(value: tuple[int, int] | int | float | None, family: str = "", of_checks: bool = False) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):  # cost per trajectory or a latency
        return f"${value:.6f}" if family == "cost_usd" else f"{value:.0f} ms"
    if isinstance(value, int):
        return str(value)
    num, den = value
    if family == "dependency_violations" and not of_checks:  # violations over checked trajectories
        return f"{num}/{den}" + ("" if den == 0 else f" ({num / den:.3f}/traj)")
    return f"{num}/{den}" if den == 0 else fraction(num, den)


def figure(value: tuple[int, int] | int | float | None, family: str = "") -> str:
    """A family's figure as the gate's table writes it (``17/90 (0.189/traj)``, ``124/197 (62.9%)``)."""
    return _ratio(value, family)


def _delta(v: FamilyVerdict) -> str:
    if v.delta is None:
        return "n/a"
    if v.family == "dependency_violations":
        return f"{v.delta:+.3f}/traj"
    if v.family in USAGE_TOLERATED:
        return f"{100 * v.delta:+.1f}%"
    return f"{100 * v.delta:+.1f} pts"


_STATUS_MD = {
    "pass": "✅ pass",
    "regressed": "❌ regressed",
    "blocking": "⛔ blocking",
    "n/a": "➖ n/a",
    "no verdict": "⚠️ no verdict",
}


def _case_row(c: CaseRef) -> str:
    fault = md(fault_key_text(c.fault)) if c.fault else "—"
    failures = ", ".join(f"`{f}`" if re.fullmatch(r"[a-z_]+", f) else md(f, 60) for f in c.failures) or "—"
    families = ", ".join(f if re.fullmatch(r"[a-z_]+", f) else md(f, 60) for f in c.families) or "—"
    return f"| {md(c.case_id)} | {c.trial} | {fault} | {failures} | {families} |"


def markdown(result: GateResult, *, families: bool = True) -> str:
    """The summary: verdict, the families table (left out where the caller
    states each family's verdict already), the cases that regressed."""
    b, c = result.baseline, result.candidate
    verdict = "⚠️ no verdict" if result.no_verdict else "✅ passed" if result.passed else "❌ failed"
    lines = [
        f"## ToolLens gate: {verdict}",
        "",
        f"Baseline **{md(b.name)}** (run {b.id}, toolset {md(b.toolset)} {md(b.toolset_label)} "
        f"`{b.toolset_version[:8]}`, {b.trajectories} trajectories) → candidate **{md(c.name)}** "
        f"(run {c.id}, toolset {md(c.toolset)} {md(c.toolset_label)} `{c.toolset_version[:8]}`, "
        f"{c.trajectories} trajectories).",
        "",
    ]
    failed = result.failed_families
    if failed:
        lines.append("Failed: " + ", ".join(f"**{v.title}** ({v.status})" for v in failed) + ".")
        lines.append("")
    for note in result.notes:
        lines.append(f"> {md(note, 400)}")
        lines.append("")
    if result.simulator_note:
        lines += [f"> **Simulator:** {md(result.simulator_note, 400)}.", ""]
    if families:
        lines += ["| family | baseline | candidate | change | allowed | result |", "|---|---|---|---|---|---|"]
    for v in result.families if families else ():
        lines.append(
            f"| {v.title} | {_ratio(v.baseline, v.family, v.of_checks)} | "
            f"{_ratio(v.candidate, v.family, v.of_checks)} | {_delta(v)} | "
            f"{v.allowed} | "
            f"{_STATUS_MD[v.status]} |"
        )
    split = [v for v in result.families if v.family == "recovery" and "; " in v.detail] if families else []
    for v in split:  # compared error source by error source: say which dropped, or that none did
        lines += ["", f"{v.title}, by error source: {md(v.detail.split('; ', 1)[1], 400)}."]
    if c.causes:
        lines += ["", "### What went wrong in the candidate (failed trajectories by first divergence)", ""]
        lines += [f"{i}. **{n}** {md(text, 300)}" for i, (n, text) in enumerate(c.causes[:5], start=1)]
    head = "| case | trial | fault | failures in the candidate | families |"
    if result.blocking_cases:
        lines += ["", f"### Blocking cases ({len(result.blocking_cases)})", "", head, "|---|---|---|---|---|"]
        lines += [_case_row(x) for x in result.blocking_cases[:MAX_LISTED]]
    lines += [
        "",
        f"### Cases that regressed ({result.regressed_count}: passed in the baseline, fail in the candidate)",
        "",
    ]
    if result.regressed_cases:
        lines += [head, "|---|---|---|---|---|"] + [_case_row(x) for x in result.regressed_cases[:MAX_LISTED]]
        if result.regressed_count > MAX_LISTED:
            lines.append(f"\n… and {result.regressed_count - MAX_LISTED} more.")
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def _xml_text(text: object) -> str:
    return _XML_BAD.sub("\ufffd", str(text))


def junit(result: GateResult) -> str:
    """JUnit XML: one test per family and one per regressed or blocking case.
    A regressed case is a failure when the gate fails, skipped (within
    tolerance) when it passes, so the report agrees with the exit status."""
    suites = ET.Element("testsuites", name="toollens gate")
    fam = ET.SubElement(suites, "testsuite", name="toollens.gate.families")
    n_fail = 0
    for v in result.families:
        tc = ET.SubElement(fam, "testcase", classname="toollens.gate.families", name=v.family)
        message = f"{v.title}: {v.detail} (allowed: {v.allowed})"
        if v.status in ("regressed", "blocking"):
            n_fail += 1
            el = ET.SubElement(tc, "failure", message=_xml_text(message), type=v.status)
            el.text = _xml_text(message)
        elif v.status in ("n/a", "no verdict"):
            ET.SubElement(tc, "skipped", message=_xml_text(message))
        else:
            ET.SubElement(tc, "system-out").text = _xml_text(message)
    fam.set("tests", str(len(result.families)))
    fam.set("failures", str(n_fail))
    fam.set("errors", "0")
    fam.set("skipped", str(sum(v.status in ("n/a", "no verdict") for v in result.families)))
    cases = ET.SubElement(suites, "testsuite", name="toollens.gate.cases")
    n_cases = n_case_fail = n_skip = 0
    listed: list[tuple[CaseRef, str]] = [(x, "blocking") for x in result.blocking_cases[:MAX_LISTED]]
    listed += [(x, "regressed") for x in result.regressed_cases[:MAX_LISTED]]
    for case, why in listed:
        n_cases += 1
        name = f"{case.case_id} trial {case.trial}" + (f" fault {fault_key_text(case.fault)}" if case.fault else "")
        tc = ET.SubElement(cases, "testcase", classname=f"toollens.gate.cases.{why}", name=_xml_text(name))
        message = f"{why}: fails in the candidate with {', '.join(case.failures) or 'no failure name'}" + (
            "" if why == "blocking" else " (passed in the baseline)"
        )
        if why == "blocking" or not result.passed:
            n_case_fail += 1
            ET.SubElement(tc, "failure", message=_xml_text(message), type=why).text = _xml_text(message)
        else:
            n_skip += 1
            ET.SubElement(tc, "skipped", message=_xml_text(message + "; within tolerance"))
    cases.set("tests", str(n_cases))
    cases.set("failures", str(n_case_fail))
    cases.set("errors", "0")
    cases.set("skipped", str(n_skip))
    suites.set("tests", str(len(result.families) + n_cases))
    suites.set("failures", str(n_fail + n_case_fail))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
