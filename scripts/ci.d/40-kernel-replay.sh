#!/usr/bin/env bash
# Kernel replay (scripts/kernel_replay.py): the 380 kernels of codegen's corpus and of three tensor programs, rendered
# by every renderer, here and at the merge base, compared source by source. About a minute here (two renders).
#
# The base: $KILN_REPLAY_BASE when set; else the merge base with origin/main; when that is this very commit (a fresh
# `git clone` of main, or CI on main itself), the previous commit, HEAD~1. A shallow clone without it: not run (said so).
# Fails when a renderer now refuses a kernel it rendered at the base, and when any kernel's source changed, unless a
# commit since the base says the change is meant with a `Kernels-Changed: <why>` line in its message.
set -euo pipefail
cd "$(dirname "$0")/../.."

base="${KILN_REPLAY_BASE:-}"
if [ -z "$base" ]; then
  if git rev-parse -q --verify origin/main >/dev/null; then
    base="$(git merge-base HEAD origin/main || true)"
  fi
  if [ -z "$base" ] || [ "$base" = "$(git rev-parse HEAD)" ]; then
    base="$(git rev-parse -q --verify 'HEAD~1' || true)"
  fi
fi
if [ -z "$base" ]; then
  echo "kernel replay: NOT RUN (no base commit: no origin/main and no HEAD~1 in this clone; set KILN_REPLAY_BASE)"
  exit 0
fi
base="$(git rev-parse "$base^{commit}")"
echo "kernel replay against $base ($(git log -1 --format=%s "$base" | cut -c1-80))"

tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
git archive "$base" packages | tar -x -C "$tree"
cache=.cache/kernel_replay
rm -rf "$cache/ci-merge-base" "$cache/ci-this-tree"  # a folder is added to, never emptied, by the script
python=(uv run --locked python scripts/kernel_replay.py)
timeout 300 "${python[@]}" --tree "$tree" --label ci-merge-base
check=(--check)
if git log --format=%B "$base..HEAD" | grep -qi '^Kernels-Changed:'; then
  echo "kernel replay: a commit since the base says kernels change (Kernels-Changed:): only new refusals fail"
  check+=(--allow-changes)
fi
timeout 300 "${python[@]}" --label ci-this-tree --against ci-merge-base "${check[@]}"
