#!/usr/bin/env bash
# Mutation testing of the core formulas (by hand or weekly; not part of .ci/run: it takes tens of
# minutes). mutmut (configured in pyproject.toml, [tool.mutmut]) copies the package to mutants/,
# changes one operator, constant or call at a time in the files of `only_mutate`, runs the tests
# that reach the changed function, and lists every mutant no test killed (a "survivor"): a
# change of the formula that the suite would not notice. docs/testing.md says how to read the
# result and lists the current survivors.
#
#   bash scripts/mutation.sh              # run (resumes where a previous run stopped)
#   bash scripts/mutation.sh --fresh      # forget earlier results first
#   MUTMUT_JOBS=4 bash scripts/mutation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip show mutmut >/dev/null 2>&1 || python -m pip install --quiet "mutmut>=3.8"
if [ "${1:-}" = "--fresh" ]; then rm -rf mutants; fi
# The tests must import the mutated copy in mutants/src/ (mutmut keeps the src layout), also in
# the commands they start: put it first on PYTHONPATH. The folder must exist before Python starts: a path that is missing at
# start-up is cached as "nothing here", and every import then silently falls back to the
# unmutated package (an installed or editable copy), so no test reaches any mutant.
mkdir -p mutants/src
export PYTHONPATH="$PWD/mutants/src:$PWD/mutants${PYTHONPATH:+:$PYTHONPATH}"
# mutmut's own entry point: under `python -m mutmut` its main module is imported twice
mutmut() { python -c 'import sys; from mutmut.__main__ import cli; sys.argv[0] = "mutmut"; cli()' "$@"; }
mutmut run --max-children "${MUTMUT_JOBS:-2}" || true
mutmut results | tee mutants/survivors.txt
echo "survivors listed in mutants/survivors.txt; show one with: mutmut show NAME" >&2
