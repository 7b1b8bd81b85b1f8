#!/usr/bin/env bash
# Hunts the intermittent lost pytest worker (README "Known issue"): runs the test suite RUNS times with WORKERS
# xdist workers, each worker started through a wrapper that logs how it ended (exit status; 128+N: killed by signal
# N), with core dumps on where the kernel allows them. A lost worker prints no faulthandler trace, so its exit
# status and a core file are the evidence to collect.
#
#   bash scripts/worker_crash_hunt.sh [RUNS] [WORKERS] [LOG_DIR]     # defaults: 5 runs, 4 workers, /tmp/kiln-hunt
#
# Each run writes LOG_DIR/run-N.log (pytest -v: which worker ran which test, in order); LOG_DIR/workers.log gets a
# line per worker exit and per run; cores land in LOG_DIR/cores when /proc/sys/kernel/core_pattern is writable
# (root). Workers that pytest-xdist itself stops at the end of a run may log 137 or nothing: only a status logged
# while a run is still going matters. Not part of CI.
set -u
cd "$(dirname "$0")/.."
RUNS=${1:-5}
WORKERS=${2:-4}
LOG=${3:-/tmp/kiln-hunt}
mkdir -p "$LOG/cores"
PYTHON=$(uv run --locked python -c 'import sys; print(sys.executable)')
if [ -w /proc/sys/kernel/core_pattern ]; then
  echo "$LOG/cores/core.%p.%s.%e" > /proc/sys/kernel/core_pattern
fi
WRAPPER="$LOG/worker.sh"
cat > "$WRAPPER" <<EOF
#!/usr/bin/env bash
ulimit -c unlimited 2>/dev/null
"$PYTHON" "\$@"
status=\$?
echo "\$(date +%T) worker \$\$ exit \$status" >> "$LOG/workers.log"
exit \$status
EOF
chmod +x "$WRAPPER"
for run in $(seq 1 "$RUNS"); do
  echo "$(date +%T) run $run" >> "$LOG/workers.log"
  "$PYTHON" -m pytest -p no:cacheprovider --dist load --tx "$WORKERS*popen//python=$WRAPPER" -m "not webgpu" \
    -o addopts="--import-mode=importlib" -v > "$LOG/run-$run.log" 2>&1
  echo "$(date +%T) run $run exit $? lost workers: $(grep -c 'crashed while running' "$LOG/run-$run.log")" \
    >> "$LOG/workers.log"
done
cat "$LOG/workers.log"
