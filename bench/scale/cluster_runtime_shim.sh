# bench_cluster_start.py's stand-in for hpclaunch's job runtime: the bench's `sbatch` on PATH
# (sbatch_shim/sbatch) points HPCLAUNCH_RUNTIME here and HLBENCH_REAL_RUNTIME at the job.sh hpclaunch
# chose. This sources that, then wraps the runtime's start-up functions and the rank wrapper so that
# each appends "NAME TIME" to $HLBENCH_MARKS/marks. Only the bench uses it: a job runs the same
# runtime code, plus these appends (a printf each).
hlb_mark() { printf '%s %s\n' "$1" "${EPOCHREALTIME/,/.}" >>"$HLBENCH_MARKS/marks"; }
hlb_mark batch
. "$HLBENCH_REAL_RUNTIME" "$@" || return $?
hlb_mark runtime
hlb_wrap() {
  eval "$(declare -f "$1" | sed "1s/^$1 /hlb_orig_$1 /")"
  eval "$1() { hlb_mark $1.begin; hlb_orig_$1 \"\$@\"; local hlb_rc=\$?; hlb_mark $1.end; return \$hlb_rc; }"
}
for hlb_f in hl_run_dir hl_choose_port hl_begin hl_monitor_start hl_watch_start hl_launch_step hl_stop_watch hl_stop_monitor; do
  hlb_wrap "$hlb_f"
done
hl_rank_log=(bash -c 'printf "wrap%s %s\n" "${RANK:-$SLURM_PROCID}" "${EPOCHREALTIME/,/.}" >>"$HLBENCH_MARKS/marks"; exec "$@"' hlb-wrap
  "${hl_rank_log[@]}")
