#!/usr/bin/env bash
# The tests marked `webgpu` (WGSL renderer, WEBGPU device, conformance and opt fuzzing on WEBGPU), in a pytest process
# of their own: lavapipe brings its own LLVM into the process (see the root conftest.py). About 1 minute here.
set -euo pipefail
cd "$(dirname "$0")/../.."
# wgpu-native prints an error line when XDG_RUNTIME_DIR is unset; give it a private one
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
timeout 900 uv run --locked pytest -n "${KILN_TEST_WORKERS:-2}" -p no:cacheprovider -rs -m webgpu \
  packages/renderers/tests packages/runtime-hcq/tests packages/tensor/tests/conformance packages/tensor/tests/export
