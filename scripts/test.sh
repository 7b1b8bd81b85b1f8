#!/usr/bin/env bash
# The one test command of kiln (README "Run the tests"); .ci/run calls exactly this.
# Runs: ruff lint + format check, file-length check, mypy --strict on strict-clean packages,
# import cycles inside packages, import-linter layer contracts, wheel packaging check, that every test file is under
# pytest's testpaths, and pytest over every package and tests/.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff"
uv run --locked ruff check .
uv run --locked ruff format --check .

echo "== file length"
uv run --locked python scripts/check_file_length.py

echo "== every test file collected"
# a test_*.py outside pyproject.toml's testpaths would never run (tests/scripts/ was missed that way)
uv run --locked python scripts/check_test_paths.py

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
uv run --locked python scripts/check_module_state.py  # no mutated module-level state in kiln.tensor (issue 41)

echo "== lint-imports"
uv run --locked lint-imports

echo "== wheels"
uv run --locked python scripts/check_wheels.py

echo "== pytest"
# the WEBGPU tests run in their own pytest process (scripts/ci.d/20-webgpu.sh): see the root conftest.py
# Only the tests that were running on a lost xdist worker ("worker 'gwN' crashed while running ...") are retried,
# once, and listed; any other failure fails CI at once (scripts/pytest_plugins/kiln_run_report.py decides).
# `-rs` lists every skipped test with its reason at the end: a skip is a test that did not run.
export PYTHONPATH="$PWD/scripts/pytest_plugins${PYTHONPATH:+:$PYTHONPATH}"
report="$(mktemp -d)/pytest-run.json"
workers="${KILN_TEST_WORKERS:-2}"
if ! uv run --locked pytest -n "$workers" -p kiln_run_report --run-report "$report" -rs -m "not webgpu" "$@"; then
  if ! retry="$(uv run --locked python scripts/pytest_plugins/kiln_run_report.py retry "$report")"; then
    exit 1
  fi
  mapfile -t lost <<<"$retry"
  echo "== pytest: ${#lost[@]} test(s) ran on a lost xdist worker; retrying them once:"
  printf '  %s\n' "${lost[@]}"
  uv run --locked pytest -n "$workers" -p kiln_run_report --run-report "$report" -rs "${lost[@]}"
fi

# Extra suites that need their own launcher (MPI ranks, a browser...): each is one script in scripts/ci.d/, run in
# name order; each keeps itself bounded (the full forms are described in the README).
for suite in scripts/ci.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $(basename "$suite" .sh)"
  bash "$suite"
done
