"""Renderers of the regression gate's verdict: a JSON document and JUnit XML.

Formatting only: every verdict comes from :func:`traceanalyzer.batch.gate.gate_check`.
"""

from __future__ import annotations

import datetime as dt
from xml.etree import ElementTree as ET

import orjson

SCHEMA = "traceanalyzer.gate"


def document(results, baseline: str, threshold: float, job: str | None = None) -> dict:
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


def json_bytes(results, baseline: str, threshold: float, job: str | None = None) -> bytes:
    return orjson.dumps(document(results, baseline, threshold, job), option=orjson.OPT_INDENT_2) + b"\n"


def junit_xml(results, threshold: float) -> bytes:
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
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"
