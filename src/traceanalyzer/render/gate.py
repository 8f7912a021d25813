"""Renderers of the regression gate's verdict: a JSON document and JUnit XML.

Formatting only: every verdict comes from :func:`traceanalyzer.store.gate.gate_check`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Protocol
from xml.etree import ElementTree as ET

import orjson

SCHEMA = "traceanalyzer.gate"


class Verdict(Protocol):
    """One job's verdict (what ``batch.gate.gate_check`` returns a list of)."""

    job: str
    passed: bool
    latest: str | None  # its run id
    baseline: str | None
    change: float | None
    message: str


def document(results: Sequence[Verdict], baseline: str, threshold: float, job: str | None = None) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "schema_version": 1,
        "checked_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "baseline": baseline,
        "max_regression": threshold,
        "job": job,
        "passed": all(r.passed for r in results),
        "results": [
            {"job": r.job, "passed": r.passed, "latest": r.latest, "baseline": r.baseline, "change": r.change, "message": r.message}
            for r in results
        ],
    }


def json_bytes(results: Sequence[Verdict], baseline: str, threshold: float, job: str | None = None) -> bytes:
    data: bytes = orjson.dumps(document(results, baseline, threshold, job), option=orjson.OPT_INDENT_2)
    return data + b"\n"


def junit_xml(results: Sequence[Verdict], threshold: float) -> bytes:
    """JUnit XML (the common subset CI systems read: Jenkins, GitLab, GitHub actions): one
    ``testsuite`` named traceanalyzer.gate, one ``testcase`` per job; a regression is a
    ``failure`` whose message is the gate's explanation."""
    failures = sum(not r.passed for r in results)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    suites = ET.Element("testsuites", name="traceanalyzer gate", tests=str(len(results)), failures=str(failures),
                        errors="0", time="0")
    suite = ET.SubElement(suites, "testsuite", name=SCHEMA, tests=str(len(results)), failures=str(failures), errors="0",
                          skipped="0", time="0", timestamp=now)
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="max_regression", value=f"{threshold:.6g}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=SCHEMA, name=r.job, time="0")
        if not r.passed:
            fail = ET.SubElement(case, "failure", message=r.message, type="regression")
            fail.text = r.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = r.message
    ET.indent(suites)
    data: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return data + b"\n"


def text(results: Sequence[Verdict]) -> str:
    """The text verdict: a line per job (a failed job's explanation included), or one line when
    no job has a baseline yet (a store too short to compare anything)."""
    if results and all(r.passed and r.baseline is None for r in results):
        return f"gate: no job has a baseline yet ({len(results)} job(s), each with one successful run): nothing to compare, passed.\n"
    return "".join(r.message + "\n" for r in results)


def failure(results: Sequence[Verdict], threshold: float, where: str) -> str | None:
    """The one line the gate fails with (``where``: where the explanation was written), or None
    when every job passed."""
    from traceanalyzer.errors import few

    failed = [r for r in results if not r.passed]
    if not failed:
        return None
    if len(failed) == 1:
        r = failed[0]
        what = (f"run {r.latest} (job {r.job}) regressed {r.change:+.1%} against baseline {r.baseline}, above the "
                f"{threshold:.1%} limit" if r.change is not None else f"run {r.latest} (job {r.job}) could not be analysed")
        return f"gate failed: {what} (explained {where})"
    return f"gate failed for {len(failed)} of {len(results)} job(s): {few(r.job for r in failed)} (each explained {where})"
