#!/bin/bash
# `make demo`: trains the reference job (hpclaunch.train_entry on scikit-learn's digits) on 2 local
# ranks through the local backend, then reports what it cost. Everything goes under ./demo/.
set -euo pipefail
PY=${1:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(dirname "$PY")
mkdir -p "$ROOT/demo"
cd "$ROOT/demo"
export HPCLAUNCH_HOME=${HPCLAUNCH_HOME:-$ROOT/demo/.hpclaunch}
[ -f digits.csv ] || "$PY" -m hpclaunch.train_entry.digits digits.csv
echo "== hpclaunch validate"
"$BIN/hpclaunch" validate ../examples/digits-ddp.yaml
echo "== hpclaunch submit --backend local --wait"
out=$("$BIN/hpclaunch" submit ../examples/digits-ddp.yaml --backend local --wait --json)
run_dir=$(printf '%s' "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_dir"])')
job_id=$(printf '%s' "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
echo "== hpclaunch status $job_id"
"$BIN/hpclaunch" status "$job_id"
echo "== last epoch of rank 0"
"$PY" - "$run_dir/metrics/rank0.jsonl" <<'PYEOF'
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "epoch"]
if epochs:
    e = epochs[-1]
    print(f"epoch {e['epoch']} step {e['step']}: loss {e['loss']:.4f}, validation accuracy {e['val_accuracy']:.3f}")
PYEOF
if "$BIN/hpclaunch" report --help >/dev/null 2>&1; then
  echo "== hpclaunch report"
  "$BIN/hpclaunch" report "$run_dir" || true
  "$BIN/hpclaunch" report "$run_dir" --format html -o "$run_dir/report.html" >/dev/null 2>&1 || true
fi
# Every hint below runs as printed, from any folder, with nothing activated: the demo keeps its own registry
# (HPCLAUNCH_HOME), and hpclaunch is in the venv, not on PATH (tests/test_demo.py runs each one).
HL="HPCLAUNCH_HOME=$(printf %q "$HPCLAUNCH_HOME") $(printf %q "$BIN/hpclaunch")"
cat <<MSG

Where everything went:
  run directory   $run_dir
  rank logs       $run_dir/logs/attempt0/rank<R>.log
  metrics         $run_dir/metrics/rank<R>.jsonl
  monitor logs    $run_dir/monitor/
  checkpoints     $run_dir/checkpoints/
  registry        $HPCLAUNCH_HOME/registry.db
MSG
if [ -f "$run_dir/report.html" ]; then echo "  HTML report     $run_dir/report.html"; fi
cat <<MSG

Look at it (these run as printed):
  $HL logs $job_id --tail 5
  $HL status $job_id
  $HL list --all
MSG
if [ -f "$run_dir/report.html" ]; then echo "  $HL report $job_id"; fi
cat <<MSG

To type just \`hpclaunch ...\`: source $(printf %q "$BIN/activate") && export HPCLAUNCH_HOME=$(printf %q "$HPCLAUNCH_HOME")
(without HPCLAUNCH_HOME, hpclaunch uses your own registry, ~/.local/state/hpclaunch, where the demo's job is not).
MSG
