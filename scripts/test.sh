#!/usr/bin/env bash
# The one test command of kiln (README "Run the tests"); .ci/run calls exactly this.
# Runs: ruff lint + format check, file-length check, mypy --strict on strict-clean packages,
# import cycles inside packages, import-linter layer contracts, wheel packaging check, and pytest over every package.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff"
uv run --locked ruff check .
uv run --locked ruff format --check .

echo "== file length"
uv run --locked python scripts/check_file_length.py

echo "== knobs documentation is current"
uv run --locked python -m kiln.uops.knobs_doc 2>/dev/null | diff -u docs/knobs.md - || {
  echo "docs/knobs.md is stale: run 'uv run python -m kiln.uops.knobs_doc > docs/knobs.md'"; exit 1; }

echo "== mypy --strict"
# Packages listed here are strict-clean; a package joins the list once it passes.
uv run --locked mypy $(cat scripts/mypy_strict_packages.txt | sed 's/^/-p /')

echo "== import cycles"
# Each package's modules must form a DAG (all imports: module level, deferred and type-only); a package with a cycle
# could be tolerated for a while with --allow PACKAGE (none is: issue 15 broke the last ones)
uv run --locked python scripts/check_import_cycles.py

echo "== lint-imports"
uv run --locked lint-imports

echo "== wheels"
uv run --locked python scripts/check_wheels.py

echo "== pytest"
# the WEBGPU tests run in their own pytest process (scripts/ci.d/20-webgpu.sh): see the root conftest.py
# A run that loses an xdist worker ("worker 'gwN' crashed", an intermittent issue under investigation, see the README)
# retries the failed tests once; a real failure fails the retry too
if ! uv run --locked pytest -n "${KILN_TEST_WORKERS:-2}" -m "not webgpu" "$@"; then
  echo "== pytest: retrying the failed tests once"
  uv run --locked pytest -n "${KILN_TEST_WORKERS:-2}" -m "not webgpu" --last-failed --last-failed-no-failures none "$@"
fi

# Extra suites that need their own launcher (MPI ranks, a browser...): each is one script in scripts/ci.d/, run in
# name order; each keeps itself bounded (the full forms are described in the README).
for suite in scripts/ci.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $(basename "$suite" .sh)"
  bash "$suite"
done
