#!/bin/bash
# tests/run-suite.sh PYTHON [PYTEST ARGS...]: the whole suite as two pytest runs side by side, the
# cluster tests (`-m cluster`: one cluster, so one at a time and in order; test_zy* and test_zz* replace
# the 2-node cluster last) and all the others. The cluster tests mostly wait on Slurm (time limits,
# requeues, dead nodes) while a core idles, so the suite takes about as long as they do alone
# (pytest-xdist's loadgroup, which would do this in one run, does not group under pytest 9.2).
# The cluster run's output follows the other's; the exit code is the first failing run's.
set -u
PY=${1:?usage: tests/run-suite.sh PYTHON [PYTEST ARGS...]}
shift
cd "$(dirname "$0")/.."
cluster_pid=""
shown=0
log=$(mktemp -t hpclaunch-cluster-tests.XXXXXX)
# Cut short (CI's time limit, ^C): the cluster run's output so far is still shown, then removed.
trap '[[ -n $cluster_pid ]] && kill "$cluster_pid" 2>/dev/null
      (( shown )) || { echo "== the cluster tests, cut short:"; tail -n 300 "$log"; }
      rm -f "$log"' EXIT
export OMP_NUM_THREADS=1
start=$SECONDS
# The cluster run keeps no .pytest_cache (the other run writes it; two writers would race).
"$PY" -m pytest -q -rsR --rerun-show-tracebacks --durations=15 -p no:cacheprovider -m cluster "$@" >"$log" 2>&1 &
cluster_pid=$!
echo "== the tests that need no cluster (the cluster tests run beside them; their output follows)"
"$PY" -m pytest -q -rsR --rerun-show-tracebacks --durations=15 -m "not cluster" "$@"
rest=$?
echo "== the tests that need no cluster: exit $rest after $((SECONDS - start)) s; waiting for the cluster tests"
wait "$cluster_pid"
cluster=$?
echo "== the cluster tests (pytest -m cluster): exit $cluster after $((SECONDS - start)) s"
cat "$log"
shown=1
# pytest's 5 (no test selected) is no failure of a half: `tests/run-suite.sh PY tests/test_x.py` may pick one.
(( rest == 5 )) && rest=0
(( cluster == 5 )) && cluster=0
if (( rest != 0 )); then exit "$rest"; fi
exit "$cluster"
