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
python -m pip show mutmut >/dev/null 2>&1 || python -m pip install --quiet "mutmut>=3.3"
if [ "${1:-}" = "--fresh" ]; then rm -rf mutants; fi
python -m mutmut run --max-children "${MUTMUT_JOBS:-2}" || true
python -m mutmut results | tee mutants/survivors.txt
echo "survivors listed in mutants/survivors.txt; show one with: python -m mutmut show NAME" >&2
