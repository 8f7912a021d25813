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
