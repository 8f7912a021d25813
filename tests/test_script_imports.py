"""The helper scripts the tests load as modules leave the importer's ``sys.path`` as it was.

A script run from the checkout puts ``src/`` first on its own path (the checkout's package); the
same line run at import time, inside the test process, made every process the tests spawned
afterwards (the rank workers: spawned processes inherit ``sys.path``) import the checkout's
sources instead of the installed wheel the tests run, without its compiled decoder."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT

#: the scripts the tests load with ``spec_from_file_location`` or import from scripts/
LOADED = ["fuzz_decoder", "gen_api_docs", "hta_reference", "kineto_frames_frozen", "make_bad_corpus", "make_big_trace", "stretch_trace"]


@pytest.mark.parametrize("name", LOADED)
def test_loading_a_script_leaves_sys_path_alone(name):
    before = list(sys.path)
    spec = importlib.util.spec_from_file_location(f"_loaded_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sys.path == before


def test_the_list_names_every_script_the_tests_load():
    """Every ``scripts/NAME.py`` a test file loads is in :data:`LOADED`."""
    import re

    loaded = set()
    for test in (ROOT / "tests").glob("*.py"):
        text = test.read_text(encoding="utf-8")
        loaded |= set(re.findall(r'spec_from_file_location\(\s*"\w+",\s*ROOT / "scripts" / "(\w+)\.py"', text))
        loaded |= set(re.findall(r"^import (\w+)  # noqa: E402", text, re.M)) & {p.stem for p in (ROOT / "scripts").glob("*.py")}
    assert loaded <= set(LOADED), sorted(loaded - set(LOADED))
