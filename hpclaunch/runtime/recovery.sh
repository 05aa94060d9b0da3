# hpclaunch's job runtime, its recovery part (docs/recovery.md): spare nodes, dead nodes and hung ranks
# judged while the step runs, the step restarted inside the allocation. job.sh sources it (same
# folder, same runtime version); its functions use job.sh's. Tested with job.sh by
# tests/test_recovery_runtime.py and tests/test_job_runtime.py, on the cluster by
# tests/test_zy_recovery_cluster.py.
# --- recovery inside the allocation: dead nodes, hung ranks, the checkpoint interval (docs/recovery.md) ---
# The script runs its launch section through hl_supervise: a node watch on every node of the
# allocation (hpclaunch/runtime/watch.py: heartbeats and each rank's progress), and per start of the
# step a judge (hpclaunch/runtime/supervise.py) that says how the step ends: by itself, with a node
# that stopped beating (its ranks' step fails, or it drops out), or with a rank hung past its bound
# (its stacks saved first). A dead node is fenced (never used again in this allocation) and the step
# starts again, from the newest checkpoint, on the healthy nodes: a spare's, or fewer nodes where the
# launcher can shrink; with neither the job is requeued without it. A hung step starts again on the
# same nodes. Every start of the step is an attempt (logs/attempt<N>/), within requeue.max_attempts.
hl_rec_on=no hl_rec_nodes=0 hl_rec_spares=0 hl_rec_hang=off hl_rec_heartbeat=10 hl_rec_shrink=0
hl_rec_checkpoint=off hl_rec_cost=30 hl_rec_rate=none hl_rec_first='' hl_rec_mtbf='' 
hl_restarts=0 hl_watch_pid='' hl_batch_node='' hl_step_pid='' hl_step_rc=0
hl_verdict=ended hl_v_node='' hl_v_rank='' hl_v_stacks='' hl_v_line=''
# hl_recovery KEY=VALUE...: the job's recovery settings, as the script renders them (recovery: and
# resources.spare_nodes): on=yes|no nodes=N spares=K hang=FACTOR:FLOOR:CEILING:CPU|off heartbeat=S
# shrink=MIN_NODES checkpoint=auto[:FIRST_INTERVAL:MTBF]|off|SECONDS cost=SECONDS rate=FAILURES_PER_NODE_HOUR|none
hl_recovery() {
  local a v num='^[0-9]+([.][0-9]+)?$'
  for a; do
    v=${a#*=}
    case $a in
      on=yes | on=no) hl_rec_on=$v ;;
      nodes=* | spares=* | shrink=*) [[ $v =~ ^[0-9]+$ ]] || hl_rec_bad "$a"; printf -v "hl_rec_${a%%=*}" %s "$v" ;;
      heartbeat=* | cost=*) [[ $v =~ $num ]] || hl_rec_bad "$a"; printf -v "hl_rec_${a%%=*}" %s "$v" ;;
      hang=off) hl_rec_hang=off ;;
      hang=*) [[ $v =~ ^[0-9.]+:[0-9.]+:[0-9.]+:[0-9.]+$ ]] || hl_rec_bad "$a"; hl_rec_hang=$v ;;
      checkpoint=auto | checkpoint=off) hl_rec_checkpoint=$v ;;
      checkpoint=auto:*) [[ $v =~ ^auto:([0-9]+):([0-9]+)$ ]] || hl_rec_bad "$a"
        hl_rec_checkpoint=auto hl_rec_first=${BASH_REMATCH[1]} hl_rec_mtbf=${BASH_REMATCH[2]} ;;
      checkpoint=*) [[ $v =~ ^[0-9]+$ ]] || hl_rec_bad "$a"; hl_rec_checkpoint=$v ;;
      rate=none) hl_rec_rate=none ;;
      rate=*) [[ $v =~ ^[0-9.]+(e-?[0-9]+)?$ ]] || hl_rec_bad "$a"; hl_rec_rate=$v ;;
      *) hl_rec_bad "$a" ;;
    esac
  done
}
hl_rec_bad() { echo "hpclaunch: hl_recovery: unknown setting '$1' (the script and its runtime disagree)" >&2; exit 2; }
hl_csv() { local IFS=,; echo "$*"; }

# hl_watch_start: the node watch, one per node of the allocation, for the whole job.
hl_watch_start() {
  [ "$hl_rec_on" = yes ] || return 0
  local idle=${hl_rec_hang##*:}
  [ "$hl_rec_hang" != off ] || idle=0.05
  mkdir -p -- "$HPCLAUNCH_RUN_DIR/.hpclaunch/watch"
  hl_watch=("$hl_python" -m hpclaunch.runtime.watch --run-dir "$HPCLAUNCH_RUN_DIR" --idle-cpu "$idle")
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    "${hl_watch[@]}" --node "${hl_alloc[0]}" --parent-pid $$ >>"$HPCLAUNCH_RUN_DIR/logs/watch.log" 2>&1 &
  else
    # --no-kill: a node that dies leaves the other nodes' watches running (and the job: sbatch --no-kill).
    # Named: hl_stop_watch finds the step by its name, hl_kill_step leaves it alone.
    srun --overlap --no-kill --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
      --cpus-per-task=1 --kill-on-bad-exit=0 --job-name=hpclaunch-watch \
      bash -c 'exec "$@" --node "$SLURMD_NODENAME"' hpclaunch-watch "${hl_watch[@]}" >>"$HPCLAUNCH_RUN_DIR/logs/watch.log" 2>&1 &
  fi
  hl_watch_pid=$!
}
hl_stop_watch() {
  local step=''
  [ -n "$hl_watch_pid" ] || return 0
  if [ -z "${HPCLAUNCH_LOCAL:-}" ]; then
    step=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null | awk '$2 == "hpclaunch-watch" { print $1; exit }')
  fi
  if [ -z "$step" ] || ! scancel -s TERM "$step" 2>/dev/null; then
    kill -TERM "$hl_watch_pid" 2>/dev/null
  fi
  hl_wait_at_most "$hl_watch_pid" 10 || kill -KILL "$hl_watch_pid" 2>/dev/null
  hl_wait "$hl_watch_pid"
  hl_watch_pid=''
}

# hl_supervise LAUNCH: runs the launch section (LAUNCH, a function that starts the step in the
# background) and follows the step to the job's end: restarts inside the allocation, or the end of
# the attempt as hl_end has it. Never returns.
hl_supervise() {
  local launch=$1 relaunch=1
  while :; do
    [ "$relaunch" = 0 ] || hl_launch_step "$launch"
    relaunch=1
    hl_follow "$hl_step_pid"
    case $hl_verdict in
      spare)
        hl_state "verdict $hl_v_line"
        hl_fence "$hl_v_node" spare
        hl_place >/dev/null
        relaunch=0 ;;
      node | hang)
        hl_state "verdict $hl_v_line"
        hl_log "$([ "$hl_verdict" = node ] && echo "node $hl_v_node stopped beating" || echo "rank $hl_v_rank on $hl_v_node hung (no progress within its bound; stacks in $hl_v_stacks)"): stopping the step"
        hl_kill_step "$hl_step_pid"
        hl_recover "$hl_verdict" ;;
      *)
        if [ "$hl_step_rc" -ne 0 ] && [ "$hl_rec_on" = yes ] && [ -z "$hl_terminated" ] && [ -z "${HPCLAUNCH_LOCAL:-}" ] &&
          hl_node_died; then
          hl_state "verdict $hl_v_line"
          hl_log "the step failed (exit code $hl_step_rc) and node $hl_v_node stopped beating"
          hl_cancel_steps
          hl_drain
          hl_recover node
        else
          hl_stop_watch
          hl_stop_monitor
          hl_decide "$hl_step_rc"
          hl_conclude "$hl_step_rc"
        fi ;;
    esac
  done
}
# hl_launch_step LAUNCH: the checkpoint interval for this start (exported), the attempt the watches
# follow, then the launch section; hl_step_pid is the step's process.
hl_launch_step() {
  local interval='' mtbf=''
  case $hl_rec_checkpoint in
    off) ;;
    auto) if [ -n "$hl_rec_first" ] && [ "$HPCLAUNCH_ATTEMPT" = 0 ]; then
      interval=$hl_rec_first mtbf=$hl_rec_mtbf   # the first start: nothing measured yet (the plan computed it)
    else
      read -r interval mtbf < <("$hl_python" -m hpclaunch.runtime.supervise interval --run-dir "$HPCLAUNCH_RUN_DIR" \
        --cost "$hl_rec_cost" --rate "$hl_rec_rate" --nodes "${#hl_nodes[@]}" 2>/dev/null)
    fi ;;
    *) interval=$hl_rec_checkpoint ;;
  esac
  [[ $interval =~ ^[0-9]+$ ]] || interval=''
  [[ $mtbf =~ ^[0-9]+$ ]] || mtbf=''
  if [ -n "$interval" ]; then export HPCLAUNCH_CHECKPOINT_INTERVAL_S=$interval; else unset HPCLAUNCH_CHECKPOINT_INTERVAL_S; fi
  # auto: the MTBF it assumed, for programs that retune the interval with the cost they measure
  if [ -n "$mtbf" ]; then export HPCLAUNCH_MTBF_S=$mtbf; else unset HPCLAUNCH_MTBF_S; fi
  printf '%s %s\n' "$HPCLAUNCH_ATTEMPT" "$(date +%s)" >"$HPCLAUNCH_RUN_DIR/.hpclaunch/attempt"
  hl_state "launch nodes=$(hl_csv "${hl_nodes[@]}") spares=$(hl_csv "${hl_spares[@]}") checkpoint_interval=${interval:-off}"
  "$1"
  hl_step_pid=$!
  hl_side_steps
}
# hl_side_steps: after the first launch of the ranks' step, the steps that run beside it for the whole
# job: the monitors that hl_monitor_start asked for, and the node watch. Later launches find them running.
hl_side_steps() {
  local pid=$hl_step_pid
  if [ -n "$hl_monitor_deferred" ]; then hl_monitor_start "${hl_monitor_opts[@]}"; fi
  if [ -z "${hl_watch_pid:-}" ]; then hl_watch_start; fi
  hl_step_pid=$pid
}
# hl_follow PID: until the step ends, or the judge gives another verdict (hl_verdict, hl_v_*);
# hl_step_rc is the step's exit code once it has ended.
hl_follow() {
  local pid=$1 out=$HPCLAUNCH_RUN_DIR/.hpclaunch/verdict judge
  hl_verdict=ended hl_v_line=''
  if [ "$hl_rec_on" = yes ]; then
    rm -f -- "$out"
    "$hl_python" -m hpclaunch.runtime.supervise judge --run-dir "$HPCLAUNCH_RUN_DIR" --nodes "$(hl_csv "${hl_nodes[@]}")" \
      --spares "$(hl_csv "${hl_spares[@]}")" --step-pid "$pid" --attempt "$HPCLAUNCH_ATTEMPT" --hang "$hl_rec_hang" \
      --heartbeat-timeout "$hl_rec_heartbeat" --batch-node "$hl_batch_node" ${HPCLAUNCH_LOCAL:+--no-node-watch} \
      --out "$out" 2>>"$HPCLAUNCH_RUN_DIR/logs/watch.log" &
    judge=$!
    hl_wait "$judge"
    hl_read_verdict "$out"
  fi
  if [ "$hl_verdict" = ended ]; then
    hl_wait "$pid"
    hl_step_rc=$?
  fi
}
# hl_read_verdict FILE: the judge's one line of words (verdict=... node=... rank=... since=...).
hl_read_verdict() {
  local w
  hl_verdict=ended hl_v_node='' hl_v_rank='' hl_v_stacks='' hl_v_line=''
  [ -s "$1" ] || return 0
  read -r hl_v_line <"$1"
  for w in $hl_v_line; do
    case $w in
      verdict=*) hl_verdict=${w#*=} ;;
      node=*) hl_v_node=${w#*=} ;;
      rank=*) hl_v_rank=${w#*=} ;;
      stacks=*) hl_v_stacks=${w#*=} ;;
    esac
  done
  case $hl_verdict in node | spare | hang | alive | ended) ;; *) hl_verdict=ended ;; esac
}
# hl_node_died: after a failed step, whether a node of it stopped beating (then hl_v_node is it).
hl_node_died() {
  local out=$HPCLAUNCH_RUN_DIR/.hpclaunch/verdict
  rm -f -- "$out"
  "$hl_python" -m hpclaunch.runtime.supervise liveness --run-dir "$HPCLAUNCH_RUN_DIR" --nodes "$(hl_csv "${hl_nodes[@]}")" \
    --heartbeat-timeout "$hl_rec_heartbeat" --batch-node "$hl_batch_node" --out "$out" 2>>"$HPCLAUNCH_RUN_DIR/logs/watch.log" &
  hl_wait "$!"
  hl_read_verdict "$out"
  [ "$hl_verdict" = node ]
}
# hl_kill_step PID: the step's processes killed: on Slurm every step of the job but hpclaunch's own
# (the launcher's, and what it started: mpirun's daemons), here the launch's process tree; then until
# its ranks are gone on every node that still beats (their ports, GPUs and files are free).
hl_kill_step() {
  local pid=$1 t0=$SECONDS
  hl_cancel_steps
  # Disowned: no status to wait for (it was killed) and no "Killed" line from bash: the log says why.
  disown "$pid" 2>/dev/null
  "$hl_python" -m hpclaunch.runtime.supervise kill-tree "$pid"
  hl_step_rc=137
  hl_drain
  hl_log "the step is stopped ($((SECONDS - t0)) s)"
}
# hl_cancel_steps: every step of the job but hpclaunch's own, killed. scancel is not waited for: it
# answers only once every node of the step has, and a dead node answers after MessageTimeout.
hl_cancel_steps() {
  local s
  [ -z "${HPCLAUNCH_LOCAL:-}" ] || return 0
  for s in $(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null |
    awk '$2 !~ /^hpclaunch-(monitor|watch)$/ && $1 !~ /[.](batch|extern)$/ { print $1 }'); do
    scancel -s KILL "$s" >/dev/null 2>&1 &
    disown $!
  done
}
# hl_drain: until the step's ranks are gone on every node that still beats (at most 30 s).
hl_drain() {
  local n live=()
  [ "$hl_rec_on" = yes ] || return 0
  for n in "${hl_nodes[@]}"; do [ "$hl_verdict" = node ] && [ "$n" = "$hl_v_node" ] || live+=("$n"); done
  "$hl_python" -m hpclaunch.runtime.supervise drain --run-dir "$HPCLAUNCH_RUN_DIR" --nodes "$(hl_csv "${live[@]}")" \
    --attempt "$HPCLAUNCH_ATTEMPT" --heartbeat-timeout "$hl_rec_heartbeat" --timeout 30 \
    --out "$HPCLAUNCH_RUN_DIR/.hpclaunch/drained" 2>>"$HPCLAUNCH_RUN_DIR/logs/watch.log"
}
# hl_fence NODE WHY: never used again in this allocation.
hl_fence() {
  hl_fenced+=("$1")
  hl_state "fence node=$1 reason=$2"
  hl_log "node $1 fenced ($2): it is not used again in this allocation"
}
# hl_recover node|hang: the next attempt inside the allocation, on healthy nodes; or the end of the job
# when no attempt is left, or a requeue without the dead node when too few healthy ones are.
hl_recover() {
  local reason=$1
  if [ $((HPCLAUNCH_ATTEMPT + 1)) -ge "$HPCLAUNCH_MAX_ATTEMPTS" ]; then
    hl_log "no attempt left to restart the step (requeue.max_attempts: $HPCLAUNCH_MAX_ATTEMPTS)"
    hl_stop_watch
    hl_stop_monitor
    hl_outcome=gave_up
    hl_conclude "$hl_step_rc"
  fi
  if [ "$reason" = node ]; then
    hl_fence "$hl_v_node" node
    if ! hl_place; then
      if [ "$hl_rec_shrink" -gt 0 ] && [ "${#hl_nodes[@]}" -ge "$hl_rec_shrink" ]; then
        hl_log "no spare node left: the step goes on with ${#hl_nodes[@]} node(s) (recovery.shrink)"
        hl_rec_nodes=${#hl_nodes[@]}
        hl_place
      else
        hl_requeue_without
      fi
    fi
  fi
  hl_state "end rc=$hl_step_rc outcome=restart reason=$reason"
  hl_restarts=$((hl_restarts + 1))
  export HPCLAUNCH_ATTEMPT=$((HPCLAUNCH_ATTEMPT + 1))
  export HPCLAUNCH_LOG_DIR=$HPCLAUNCH_RUN_DIR/logs/attempt$HPCLAUNCH_ATTEMPT
  mkdir -p -- "$HPCLAUNCH_LOG_DIR"
  [ -z "$hl_port_span" ] || hl_choose_port "$hl_port_base" "$hl_port_span"
  hl_place
  hl_state "start host=$(hostname) nodes=${#hl_nodes[@]} head=$hl_head port=$hl_port restart=$hl_restarts reason=$reason"
  hl_log "restarting the step inside the allocation (attempt $HPCLAUNCH_ATTEMPT of $HPCLAUNCH_MAX_ATTEMPTS, after a $([ "$reason" = node ] && echo 'dead node' || echo 'hang')) on ${hl_nodes[*]}${hl_spares[*]:+ (spare: ${hl_spares[*]})}"
}
# hl_requeue_without: too few healthy nodes for the step: the job goes back to the queue, the fenced
# nodes excluded (held while it is changed: a requeued job may otherwise start before the scheduler
# has noticed the node is dead). Never returns.
hl_requeue_without() {
  local ex
  ex=$(hl_csv "${hl_fenced[@]}")
  hl_stop_watch
  hl_stop_monitor
  hl_state "end rc=$hl_step_rc outcome=requeued reason=node exclude=$ex"
  hl_log "too few healthy nodes left for the step: requeueing the job without $ex (attempt $((HPCLAUNCH_ATTEMPT + 2)) of $HPCLAUNCH_MAX_ATTEMPTS)"
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    : >"$HPCLAUNCH_RUN_DIR/.hpclaunch/requeue"
    exit 0
  fi
  trap '' TERM   # the requeue stops this shell: the hold's update and release come first
  if scontrol requeuehold "$SLURM_JOB_ID"; then
    scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$ex" || hl_log "the requeued job could not be kept off $ex"
    scontrol release "$SLURM_JOB_ID" || hl_log "scontrol release failed: the job is held (scontrol release $SLURM_JOB_ID)"
    exit 0
  fi
  hl_log "scontrol requeuehold failed; the job ends here"
  exit "$hl_step_rc"
}
:
