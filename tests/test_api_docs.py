"""The API reference (docs/api.md) is current, documents every public name fully, and every
``Example:`` in it runs and prints what it says (doctest) on the fixtures."""

from __future__ import annotations

import doctest
import inspect
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import PACKAGE, ROOT, TRACES

sys.path.insert(0, str(ROOT / "scripts"))
import gen_api_docs  # noqa: E402

import traceanalyzer  # noqa: E402

VERBS = [(n, getattr(traceanalyzer, n)) for n in traceanalyzer.__all__ if n != "__version__"]
FUNCTIONS = [(n, f) for n, f in VERBS if not inspect.isclass(f)]


def test_reference_is_current():
    """docs/api.md is what scripts/gen_api_docs.py writes from today's docstrings."""
    assert (ROOT / "docs" / "api.md").read_text(encoding="utf-8") == gen_api_docs.render(), (
        "docs/api.md is not current: run python scripts/gen_api_docs.py"
    )
    r = subprocess.run([sys.executable, "scripts/gen_api_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_public_name_is_in_the_reference():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for name, _ in VERBS:
        assert f"## `{name}`" in text


@pytest.mark.parametrize("name,fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_every_verb_is_fully_documented(name, fn):
    """Parameters (each one of the signature), Returns, Example; type hints on every parameter."""
    summary, sec = gen_api_docs.parse_doc(fn.__doc__ or "")
    assert summary, name
    assert {"Parameters", "Returns", "Example"} <= set(sec), f"{name}: sections {sorted(sec)}"
    documented = {p.strip().strip("*") for n, _ in gen_api_docs.entries(sec["Parameters"]) for p in n.split(",")}
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        assert p.name in documented, f"{name}: parameter {p.name} is not documented"
        assert p.annotation is not inspect.Parameter.empty or p.kind is p.VAR_KEYWORD, f"{name}: {p.name} has no type hint"
    assert sig.return_annotation is not inspect.Signature.empty, name


EXAMPLES = [(n, o) for n, o in VERBS if "Example:" in (o.__doc__ or "")]


@pytest.mark.parametrize("name,obj", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_examples_run(name, obj, monkeypatch):
    """Each example, run as a doctest from the repository root (its paths are the fixtures')."""
    _, sec = gen_api_docs.parse_doc(obj.__doc__)
    if "shared/" in sec["Example"] and not TRACES.exists():
        pytest.skip("the example reads the shared traces, which are not here")
    monkeypatch.chdir(ROOT)
    test = doctest.DocTestParser().get_doctest(sec["Example"], {}, f"traceanalyzer.{name}", None, 0)
    assert test.examples, name
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    out: list[str] = []
    result = runner.run(test, out=out.append)
    assert result.failed == 0, "".join(out)


def test_breakdown_example_numbers_are_the_hand_count():
    """The doctest above proves the examples current; the numbers the ``breakdown`` example prints
    for DLRM rank 1 (its step and exposed comm, ns) are also those of the plain-Python count of
    the raw JSON (tests/test_partition.py), so the example shows right numbers, not only today's."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_partition import _reference_for_single_step

    ref, dur = _reference_for_single_step(sorted((ROOT / "fixtures" / "kineto" / "dlrm-v100-8rank").glob("worker1_*"))[0])
    assert f"(1, {dur}, {ref['exposed_comm']})" in traceanalyzer.breakdown.__doc__


def test_import_is_light():
    """``import traceanalyzer`` loads no polars (the command line handles signals before it
    loads); the first use of a verb does."""
    code = ("import sys, traceanalyzer as ta; assert 'polars' not in sys.modules, 'polars on import'; "
            "ta.breakdown; assert 'polars' in sys.modules; print(sorted(set(dir(ta)) & set(ta.__all__)) == sorted(ta.__all__))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        traceanalyzer.nope  # noqa: B018


def test_py_typed_is_shipped():
    assert (PACKAGE / "py.typed").is_file()  # the package the tests import (the installed one)
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in cfg["tool"]["setuptools"]["package-data"]["traceanalyzer"]


def test_no_subpackage_shares_a_verb_s_name():
    """No module directly under the package is named like a name of the public registry (the
    report model is ``traceanalyzer.views``, the store ``traceanalyzer.store``: ``ta.report`` and
    ``ta.batch`` are only verbs), and importing the views and the store leaves the verbs alone."""
    import pkgutil

    import traceanalyzer as ta

    assert not {m.name for m in pkgutil.iter_modules(ta.__path__)} & set(ta._API)
    code = ("from traceanalyzer.views import document; import traceanalyzer as ta, traceanalyzer.views.annotate, "
            "traceanalyzer.store.database; print(callable(ta.report), ta.report.__module__, ta.batch.__module__, document.__name__)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.stdout.split() == ["True", "traceanalyzer.api.documents", "traceanalyzer.api.nightly", "traceanalyzer.views.document"], r.stderr


def test_every_verb_survives_importing_every_module():
    """After every module of the package is imported, each name of the registry is still what the
    registry names (a verb: the API's function; a type: its class): ``ta.reconcile`` is the verb, whose subpackage is ``traceanalyzer.reconciliation``
    (no module is named ``reconcile``, so no import can take the verb for a module or the other way
    round), and no subpackage is named like a verb (the report model is ``views``, the store
    ``store``). A training-loop integration whose framework is not
    installed (an optional extra) is left out."""
    code = (
        "import importlib, pkgutil, traceanalyzer as ta\n"
        "mods = [m.name for m in pkgutil.walk_packages(ta.__path__, 'traceanalyzer.') if m.name != 'traceanalyzer.__main__']\n"
        "for m in mods:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:  # a training-loop integration whose framework (an extra) is absent\n"
        "        if not (m.startswith('traceanalyzer.integrations.') and e.name in ('torch', 'lightning', 'transformers', 'mlflow')):\n"
        "            raise\n"
        "wrong = [n for n, t in ta._API.items() if getattr(ta, n) is not getattr(importlib.import_module(t.split(':')[0]), t.split(':')[1])]\n"
        "top = sorted({m.split('.')[1] for m in mods} & set(ta._API))\n"
        "print(len(mods), ta.reconcile.__module__, ta.reconcile.__name__, wrong, top)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    n, module, name, *rest = r.stdout.strip().split(maxsplit=3)
    assert int(n) > 100 and (module, name) == ("traceanalyzer.api.modelling", "reconcile")
    assert rest == ["[] []"], r.stdout
