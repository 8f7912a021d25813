"""JSON Schemas (draft 2020-12) of every JSON document the command line writes.

Each document names its schema in its ``schema`` key (``"traceanalyzer.breakdown"``, ...); the
schema file is ``<name>.schema.json`` beside this module (shipped in the wheel). Validate with any
JSON Schema library, e.g.::

    import jsonschema, traceanalyzer.schemas as s
    jsonschema.validate(doc, s.load(doc["schema"]))

Contract: keys are only ever added (the schemas allow additional properties), never renamed or
removed without a ``schema_version`` bump.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

def _ids() -> list[str]:
    names = [f.name for f in resources.files(__name__).iterdir() if f.name.endswith(".schema.json")]
    return sorted("traceanalyzer." + n.removesuffix(".schema.json") for n in names)


#: every schema id (the ``schema`` key of a document), one per ``*.schema.json`` file here
SCHEMAS: list[str] = _ids()


def file_name(schema_id: str) -> str:
    """``traceanalyzer.breakdown`` -> ``breakdown.schema.json``."""
    return schema_id.removeprefix("traceanalyzer.") + ".schema.json"


@lru_cache(maxsize=None)
def load(schema_id: str) -> dict:
    """The JSON Schema of the documents whose ``schema`` key is ``schema_id``."""
    if schema_id not in SCHEMAS:
        raise KeyError(f"no schema {schema_id!r}: one of {', '.join(SCHEMAS)}")
    return json.loads(resources.files(__name__).joinpath(file_name(schema_id)).read_text(encoding="utf-8"))
