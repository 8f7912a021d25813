"""Generate docs/api.md, the Python API reference, from the docstrings of the public API.

Every name in ``traceanalyzer.__all__`` (the lazy registry in ``traceanalyzer/__init__.py``) is
documented, in registry order: functions with their signature and their ``Parameters:``,
``Returns:``, ``Raises:`` and ``Example:`` sections, classes with their fields and public
methods; then the exceptions of ``traceanalyzer.errors`` with their exit codes.

    python scripts/gen_api_docs.py            # write docs/api.md
    python scripts/gen_api_docs.py --check    # exit 1 if docs/api.md is not current

A test (tests/test_api_docs.py) runs ``--check`` and every ``Example:`` of the reference.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
TARGET = ROOT / "docs" / "api.md"
SECTIONS = ("Parameters", "Returns", "Raises", "Example")

INTRO = """\
# Python API reference

_Generated from the docstrings by `scripts/gen_api_docs.py`; do not edit by hand._

```python
import traceanalyzer as ta
a = ta.analyze("runs/2026-11-20/")   # a file, a directory of rank files, or a list of them
ta.breakdown(a)                      # polars DataFrame: one row per (rank, step)
```

Every verb takes a **source**: a path (a trace file, a directory holding the rank files of one
job, or a list of them), a `Trace` from `ta.load`, or an `Analysis` from `ta.analyze`. A path
or a trace is analysed on each call; to ask several questions of one trace, call `ta.analyze`
once and pass the analysis on. An analysis saved with `a.save("run.taz")` (one file: attach it to
a ticket) is read back by `ta.load_analysis`, and its path is a source too. `import traceanalyzer`
is light: polars and the parsers load on the first call.

Most verbs return a polars DataFrame; the others a frozen result object, typed field by field
(see [What each verb returns](#what-each-verb-returns)). A result that is a document
(`StragglerView`, `ReportModel`, `ReconcileResult`, `PredictResult`, `PlanResult`,
`BatchSummary`) has `to_dict()`: the document as a `dict`, the one the command's `-f json` writes
and the one these verbs returned before 0.1.0 (`PlanResult.from_dict(doc)` makes a result of such
a document, one read back from `-f json` say). Indexing such a result as that `dict`
(`r["key"]`, `"key" in r`, `r.get(...)`, `dict(r)`) still works, with a `DeprecationWarning`
that names the attribute to use; `json.dumps` and `isinstance(r, dict)` need `r.to_dict()`.
Every signature is type-checked (`mypy --strict`): no argument and no result is typed `Any`.

Conventions shared by every frame:

* times are integer nanoseconds in `*_ns` columns (exact: the buckets of a step sum exactly to
  its duration); means and medians are Float64 nanoseconds; `*_us` columns are `*_ns / 1000`
  and `*_ms` columns `*_ns / 1e6`;
* `rank` is the global rank (Int32), `step` the step number (Int64: `N` of `ProfilerStep#N`,
  0 when the whole trace is one step);
* the buckets `compute`, `recompute`, `exposed_comm`, `other` and `idle` partition every step;
  `overlapped_comm` (communication hidden under compute) is reported beside them.

Errors are subclasses of `traceanalyzer.errors.TraceAnalyzerError` (see [Errors](#errors)); each
names the file or argument at fault. An argument that was renamed still takes its old name,
with a `DeprecationWarning` that names the new one and the version that renamed it. The [tutorial](tutorial.md) walks through a real 8-rank job.
"""


#: section headers as written (Google style ``Parameters:``, or NumPy style ``Parameters`` over a
#: line of dashes) -> the section they start
HEADERS = {"parameters": "Parameters", "args": "Parameters", "arguments": "Parameters", "returns": "Returns",
           "return": "Returns", "raises": "Raises", "example": "Example", "examples": "Example"}


def parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """(summary text, {section: body}) of a docstring: Google-style ``Parameters:`` headers or
    NumPy-style ones (the name over a line of dashes)."""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] = summary
    skip_dashes = False
    for line in lines:
        if skip_dashes and re.match(r"^-{3,}\s*$", line):
            skip_dashes = False
            continue
        skip_dashes = False
        m = re.match(r"^(\w+)(:?)\s*$", line)
        if m and m.group(1).lower() in HEADERS:
            current = sections.setdefault(HEADERS[m.group(1).lower()], [])
            skip_dashes = not m.group(2)
            continue
        current.append(line)
    return "\n".join(summary).strip(), {k: inspect.cleandoc("\n".join(v)) for k, v in sections.items()}


def rst_to_md(text: str) -> str:
    """The few reST constructs the docstrings use, as Markdown."""
    text = re.sub(r":(?:func|class|mod|data|attr|meth):`~?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`", text)
    return text.replace("``", "`")


def entries(body: str) -> list[tuple[str, str]]:
    """``name: text`` entries (continuation lines indented) of a Parameters/Raises section; a
    NumPy-style entry may be a name alone on its line (an exception), its text on the lines below."""
    out: list[tuple[str, str]] = []
    for line in body.splitlines():
        m = re.match(r"^(\*{0,2}[\w, ]+?)\s*:\s*(.*)$", line)
        if m and not line.startswith(" "):
            numpy_style = " : " in line  # "name : type", the description on the lines below
            out.append((m.group(1), f"({m.group(2)})" if numpy_style and m.group(2) else m.group(2)))
        elif re.match(r"^[\w.]+\s*$", line):  # NumPy-style Raises: the exception alone, its text below
            out.append((line.strip(), ""))
        elif out:
            out[-1] = (out[-1][0], (out[-1][1] + " " + line.strip()).strip())
    return out


def paragraphs(body: str) -> str:
    """Re-flow a section body: blank-line separated paragraphs, indented lines joined."""
    return "\n\n".join(" ".join(x.strip() for x in p.splitlines()) for p in re.split(r"\n\s*\n", body.strip()))


def signature(name: str, fn) -> str:
    parts: list[str] = []
    star = False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
            continue
        s = p.name
        if p.annotation is not inspect.Parameter.empty:
            s += f": {p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)}"
        if p.default is not inspect.Parameter.empty:
            s += f" = {p.default!r}"
        parts.append(s)
    ret = inspect.signature(fn).return_annotation
    tail = "" if ret is inspect.Signature.empty else f" -> {ret}"
    return f"ta.{name}({', '.join(parts)}){tail}"


def example_md(text: str) -> list[str]:
    """An ``Example`` section: its doctest blocks (paragraphs that start with ``>>>``) as Python
    code, the prose around them as text."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        if para.lstrip().startswith(">>>"):
            out += ["```python", para, "```", ""]
        else:
            out += [rst_to_md(paragraphs(para)), ""]
    return out


def function_md(name: str, fn) -> list[str]:
    summary, sec = parse_doc(fn.__doc__ or "")
    out = [f"## `{name}`", "", "```python", signature(name, fn), "```", "", rst_to_md(paragraphs(summary)), ""]
    if "Parameters" in sec:
        out += ["**Parameters**", ""]
        out += [f"- `{n}`: {rst_to_md(t)}" for n, t in entries(sec["Parameters"])]
        out.append("")
    if "Returns" in sec:
        out += ["**Returns**", "", rst_to_md(paragraphs(sec["Returns"])), ""]
    if "Raises" in sec:
        out += ["**Raises**", ""]
        out += [f"- `{n}`: {rst_to_md(t)}" for n, t in entries(sec["Raises"])]
        out.append("")
    if "Example" in sec:
        out += ["**Example**", "", *example_md(sec["Example"])]
    return out


def class_md(name: str, cls) -> list[str]:
    summary, sec = parse_doc(cls.__doc__ or "")
    out = [f"## `{name}`", "", rst_to_md(paragraphs(summary)), ""]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    if fields:
        notes = dict(re.findall(r"^\s+(\w+): [^#\n]*#:? *(.*)$", inspect.getsource(cls), flags=re.M))
        out += ["| field | type | what it holds |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):  # internal: a cache, the document behind to_dict()
                continue
            kind = (f.type if isinstance(f.type, str) else inspect.formatannotation(f.type)).replace("|", "\\|")
            note = rst_to_md(_no_internals(notes.get(f.name, ""))).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            out.append(f"| `{f.name}` | `{kind}` | {note} |")
        out.append("")
    methods = []
    for attr, value in vars(cls).items():
        if attr.startswith("_") or attr in fields:
            continue
        fn = value.fget if isinstance(value, property) else value
        if callable(fn) and fn.__doc__:
            label = f"`{attr}`" if isinstance(value, property) else f"`{attr}()`"
            methods.append(f"- {label}: {rst_to_md(paragraphs(parse_doc(fn.__doc__)[0]))}")
    if methods:
        out += ["**Methods and properties**", "", *methods, ""]
    if "Example" in sec:
        out += ["**Example**", "", *example_md(sec["Example"])]
    return out


#: a reference to an internal module in a field's note, e.g. ``(classify.comm.collectives)``: the
#: reference names only the public API (a test checks docs/api.md names no internal module)
INTERNAL = re.compile(r"\s*\((?:traceanalyzer\.)?(?:classify|engine|reconcile|model|parsers|render|report|batch|baselines)\.[\w.]+\)")


def _no_internals(note: str) -> str:
    return INTERNAL.sub("", note)


def errors_md() -> list[str]:
    from traceanalyzer import errors

    out = ["## Errors", "", rst_to_md(paragraphs(inspect.getdoc(errors) or "")), "",
           "| exception | exit code | meaning |", "|---|---:|---|"]
    classes = [c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, errors.TraceAnalyzerError)]
    for c in sorted(classes, key=lambda c: (c.exit_code, c.__name__)):
        meaning = errors.EXIT_CODES.get(c.exit_code, "")
        doc = paragraphs(parse_doc(c.__doc__)[0]) if c.__doc__ and c is not errors.TraceAnalyzerError else ""
        text = rst_to_md(doc or meaning).replace("|", "\\|")
        out.append(f"| `{c.__name__}` | {c.exit_code} | {text} |")
    out.append("")
    return out


def public_api() -> list[tuple[str, object]]:
    import traceanalyzer

    return [(n, getattr(traceanalyzer, n)) for n in traceanalyzer.__all__ if n != "__version__"]


def returns_md(api: list[tuple[str, object]]) -> list[str]:
    """The table of what each verb returns: its return annotation."""
    out = ["## What each verb returns", "", "| verb | returns |", "|---|---|"]
    for name, fn in api:
        if not inspect.isclass(fn):
            ret = inspect.signature(fn).return_annotation
            kind = ret if isinstance(ret, str) else inspect.formatannotation(ret)
            link = f"[`{kind}`](#{kind.lower()})" if any(n == kind for n, _ in api) else f"`{kind}`"
            out.append(f"| [`{name}`](#{name.lower()}) | {link.replace('|', chr(92) + '|')} |")
    return [*out, ""]


def vocabulary_md(api: list[tuple[str, object]]) -> list[str]:
    """The argument names: one per idea, the verbs that take each, and the older names still taken."""
    from traceanalyzer.api._arguments import VOCABULARY
    from traceanalyzer.api._deprecation import RENAMED

    takers: dict[str, list[str]] = {}
    for name, obj in api:
        if inspect.isclass(obj):
            continue
        for p in inspect.signature(obj).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                takers.setdefault(p.name, []).append(name)
    out = ["## Argument names", "",
           "One name per idea, the same in every verb; each name has one type, and a value of another type is an",
           "`InvalidArgument` naming the argument (before any file is read). `None` is accepted where the default is",
           "`None`.", "",
           "| argument | what it is | type | verbs |", "|---|---|---|---|"]
    for word, w in VOCABULARY.items():
        verbs = takers.get(word, [])
        shown = ", ".join(f"`{v}`" for v in verbs) if len(verbs) <= 6 else f"{len(verbs)} verbs"
        out.append(f"| `{word}` | {rst_to_md(w.idea).replace('|', chr(92) + '|')} | {w.expected} | {shown} |")
    out += ["", "Older names, still taken with a `DeprecationWarning`:", "",
            "| verb | older name | name | renamed in |", "|---|---|---|---|"]
    public = {n for n, _ in api}
    for verb, old, new, version in sorted(set(RENAMED)):
        if verb in public:
            out.append(f"| `{verb}` | `{old}` | `{new}` | {version} |")
    return out + [""]


def render() -> str:
    api = public_api()
    out = [INTRO, *returns_md(api), "## Contents", ""]
    out += ["- [Argument names](#argument-names)"]
    out += [f"- [`{n}`](#{n.lower()})" for n, _ in api] + ["- [Errors](#errors)", ""]
    out += vocabulary_md(api)
    for name, obj in api:
        out += class_md(name, obj) if inspect.isclass(obj) else function_md(name, obj)
    out += errors_md()
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is not current")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(SRC))
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is not current: run python scripts/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
