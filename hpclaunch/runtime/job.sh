# hpclaunch's job runtime: the logic every job script hpclaunch renders shares, shipped once with
# hpclaunch and sourced by the script, which carries only the job's values (docs/architecture.md):
#
#   . "$hl_runtime" 1          # 1: the runtime version the script was rendered for
#
# The functions and variables below that templates/*.j2 use are the runtime's interface; the
# others are its own. Only bash runs here (the batch shell, on the allocation's first node); what
# runs on other nodes or in a container (the rank wrapper, the signal step) is passed there as
# text. tests/test_job_runtime.py sources this file and calls its functions with real processes,
# no Slurm.

# --- the version: a script rendered for another one stops here, with one line ---
# Bump it when an already rendered script would trip over a change (a function renamed or given
# another argument, a variable the script sets renamed): a job queued before an upgrade then stops
# at its start, saying so, instead of failing obscurely. A change within the functions keeps it.
hl_runtime_version=1
if [ "${1-}" != "$hl_runtime_version" ]; then
  printf 'hpclaunch: this job script was rendered for job runtime %s, but %s is runtime %s: submit the job again with this hpclaunch (or render it again), or run it with the Python of the hpclaunch that rendered it (HPCLAUNCH_PYTHON)\n' \
    "${1:-(none)}" "${BASH_SOURCE[0]}" "$hl_runtime_version" >&2
  exit 2
fi

hl_python=${hl_python:-${HPCLAUNCH_PYTHON:-python3}}
hl_log() { printf '%s hpclaunch: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
hl_state() { printf '%s attempt=%s %s\n' "$(date +%s)" "$HPCLAUNCH_ATTEMPT" "$*" >>"$HPCLAUNCH_RUN_DIR/.hpclaunch/state"; }

# --- run directory ---
# hl_run_dir RUNS_ROOT SLUG: makes and exports HPCLAUNCH_RUN_DIR (RUNS_ROOT/SLUG-JOBID, or
# .../task<N> for a sweep task: hl_task), the attempt and its log folder; keeps a copy of the script
# and links Slurm's log from it. Exits 1 where the folder cannot be made.
hl_run_dir() {
  local root=$1 slug=$2 out link
  case $root in /*) ;; *) root=${SLURM_SUBMIT_DIR:-$PWD}/$root ;; esac
  if [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
    # A sweep split into several arrays (MaxArraySize) shares the first array's folder; tasks count on.
    hl_task=$(( ${HPCLAUNCH_ARRAY_OFFSET:-0} + SLURM_ARRAY_TASK_ID ))
    HPCLAUNCH_RUN_DIR=$root/$slug-${HPCLAUNCH_SWEEP_ID:-$SLURM_ARRAY_JOB_ID}/task$hl_task
  else
    HPCLAUNCH_RUN_DIR=$root/$slug-$SLURM_JOB_ID
  fi
  # A job hpclaunch resubmitted after a node failure continues in the run directory it started in.
  [ -z "${HPCLAUNCH_RESUME_DIR:-}" ] || HPCLAUNCH_RUN_DIR=$HPCLAUNCH_RESUME_DIR
  export HPCLAUNCH_RUN_DIR
  export HPCLAUNCH_ATTEMPT=$(( ${HPCLAUNCH_ATTEMPT_BASE:-0} + ${SLURM_RESTART_COUNT:-0} ))
  # Restarts inside an earlier allocation numbered attempts too (.hpclaunch/attempt: the last launched)
  local last=''
  [ ! -f "$HPCLAUNCH_RUN_DIR/.hpclaunch/attempt" ] || read -r last _ <"$HPCLAUNCH_RUN_DIR/.hpclaunch/attempt"
  case $last in "" | *[!0-9]*) ;; *) [ "$last" -lt "$HPCLAUNCH_ATTEMPT" ] || HPCLAUNCH_ATTEMPT=$((last + 1)) ;; esac
  export HPCLAUNCH_LOG_DIR=$HPCLAUNCH_RUN_DIR/logs/attempt$HPCLAUNCH_ATTEMPT
  mkdir -p -- "$HPCLAUNCH_LOG_DIR" "$HPCLAUNCH_RUN_DIR/monitor" "$HPCLAUNCH_RUN_DIR/metrics" \
    "$HPCLAUNCH_RUN_DIR/checkpoints" "$HPCLAUNCH_RUN_DIR/.hpclaunch" ||
    { echo "hpclaunch: cannot create the run directory $HPCLAUNCH_RUN_DIR" >&2; exit 1; }
  [ -e "$HPCLAUNCH_RUN_DIR/script.sbatch" ] || cp -- "$0" "$HPCLAUNCH_RUN_DIR/script.sbatch" 2>/dev/null || true
  if [ -z "${HPCLAUNCH_LOCAL:-}" ]; then
    # Given straight to `sbatch`, Slurm's log is in the submit directory: link it from the run directory.
    if [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
      link=${HPCLAUNCH_RUN_DIR%/task*}/logs/slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.out
    else
      link=$HPCLAUNCH_RUN_DIR/logs/slurm.out
    fi
    out=$(readlink -f "/proc/$$/fd/1" 2>/dev/null) || out=''
    [ ! -f "$out" ] || [ -e "$link" ] || ln -s -- "$out" "$link" 2>/dev/null || true
  fi
  export HPCLAUNCH_REQUEUE_FLAG=$HPCLAUNCH_RUN_DIR/.hpclaunch/requeue-requested
  rm -f -- "$HPCLAUNCH_REQUEUE_FLAG"
}

hl_hostnames() {
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then printf '%s\n' "${SLURM_JOB_NODELIST:-localhost}"
  else scontrol show hostnames "$SLURM_JOB_NODELIST"; fi
}

# hl_step NTASKS_PER_NODE [SRUN_OPTION...] -- COMMAND...: one job step, through srun on Slurm;
# under the local backend, NTASKS copies with the variables srun sets for a task (JAX's cluster
# detection needs the step's node list, TensorFlow's its tasks per node), killed together on failure.
hl_step_id=0
hl_step() {
  local ntasks=$1 opts=() pids=() alive=() still=() i p st rc=0 gtids node done_pid done_st failed=
  shift
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  if [ -z "${HPCLAUNCH_LOCAL:-}" ]; then
    # hl_step_place: the step's nodes (hl_place); after a restart the step overlaps the old one's
    # CPUs, which Slurm holds until it hears from a dead node (docs/recovery.md)
    # --ntasks on a subset of the allocation: else srun takes the job's SLURM_NTASKS (all its nodes')
    srun "${hl_step_place[@]}" ${hl_step_subset:+--ntasks=$((${#hl_nodes[@]} * ntasks))} --ntasks-per-node="$ntasks" \
      "${opts[@]}" "$@"
    return
  fi
  gtids=$(seq -s, 0 $((ntasks - 1)))
  node=$(hostname)
  for ((i = 0; i < ntasks; i++)); do
    SLURM_PROCID=$i SLURM_LOCALID=$i SLURM_NODEID=0 SLURM_NTASKS=$ntasks SLURM_NPROCS=$ntasks \
      SLURM_STEP_ID=$hl_step_id SLURM_STEPID=$hl_step_id SLURM_STEP_NUM_TASKS=$ntasks SLURM_STEP_NUM_NODES=1 \
      SLURM_STEP_NODELIST="$SLURM_JOB_NODELIST" SLURM_STEP_TASKS_PER_NODE=$ntasks SLURM_GTIDS=$gtids \
      SLURMD_NODENAME="$node" "$@" &
    pids+=("$!")
  done
  hl_step_id=$((hl_step_id + 1))
  # Each task's status: the one `wait -n` returns, or, for one bash already reaped and dropped from
  # its job table (a task that ended while the next started: `wait -n` then says "no such job" and
  # 127), the status `wait PID` still keeps. The first failure ends the others, once.
  alive=("${pids[@]}")
  while [ ${#alive[@]} -gt 0 ]; do
    wait -n -p done_pid "${alive[@]}" 2>/dev/null
    done_st=$?
    still=()
    for p in "${alive[@]}"; do
      if [ "$p" = "${done_pid:-}" ]; then
        st=$done_st
      elif kill -0 "$p" 2>/dev/null; then
        still+=("$p")
        continue
      else
        wait "$p"
        st=$?
      fi
      [ "$st" -eq 0 ] || [ "$rc" -ne 0 ] || { rc=$st; failed=1; }
    done
    if [ -n "$failed" ] && [ ${#still[@]} -gt 0 ]; then
      kill -TERM "${still[@]}" 2>/dev/null
      failed=''
    fi
    alive=("${still[@]}")
  done
  return "$rc"
}
# hl_wait_at_most PID SECONDS: until the process has ended (0), or SECONDS have passed (1).
hl_wait_at_most() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    [ -e "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  return 1
}
# Waits for a background pid; a trapped signal interrupts `wait`, so wait again (bash keeps the status).
hl_wait() {
  local rc
  while :; do
    hl_trapped=''
    wait "$1"
    rc=$?
    [ -n "$hl_trapped" ] || return "$rc"
  done
}

# --- signals: the requeue signal and SIGTERM (docs/requeue.md) ---
# The requeue signal to each rank process listed in logs/attempt<N>/ranks.tsv, on that rank's own
# node (one task per node), once: ranks that already ended are skipped. Only the rank's process gets
# it, not its wrapper, torchrun, mpirun or the monitor (a step-wide signal would reach them all).
hl_signal_body='sig=$1 map=$2 h=$(hostname) n=0
while read -r rank host pid; do
  [ "$host" = "$h" ] && [ ! -e "${map%/*}/rank$rank.exit" ] && kill -s "$sig" "$pid" 2>/dev/null && n=$((n + 1))
done <"$map"
printf "%s hpclaunch: SIG%s sent to %s rank process(es) on %s\n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$sig" "$n" "$h" >&2'
hl_signal_ranks() {
  local map=$HPCLAUNCH_LOG_DIR/ranks.tsv
  if [ ! -s "$map" ]; then
    hl_log "no rank process has started yet: none to signal"
  elif [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    bash -c "$hl_signal_body" hpclaunch-signal "$1" "$map"
  else
    # the step's nodes (hl_place): a fenced node is dead, a spare runs no rank
    srun --overlap "${hl_step_place[@]}" --ntasks="${#hl_nodes[@]}" --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=0 \
      bash -c "$hl_signal_body" hpclaunch-signal "$1" "$map"
  fi
}
hl_signalled=''
hl_terminated=''
hl_trapped=''
hl_signal_ranks_on=no
hl_requeue_by=hpclaunch
# hl_requeue_mode signal_ranks=yes|no by=hpclaunch|program: what the requeue signal
# ($HPCLAUNCH_REQUEUE_SIGNAL) does (requeue.signal_ranks, requeue.by), and the traps for it and SIGTERM.
hl_requeue_mode() {
  local a
  for a; do
    case $a in
      signal_ranks=yes | signal_ranks=no) hl_signal_ranks_on=${a#*=} ;;
      by=hpclaunch | by=program) hl_requeue_by=${a#*=} ;;
      *) echo "hpclaunch: hl_requeue_mode: unknown setting '$a' (the script and its runtime disagree)" >&2; exit 2 ;;
    esac
  done
  trap hl_on_requeue_signal "$HPCLAUNCH_REQUEUE_SIGNAL"
  trap hl_on_term TERM
}
# What happens next depends on the mode (docs/requeue.md); the log says which.
hl_on_requeue_signal() {
  hl_trapped=1
  [ -z "$hl_signalled" ] || return 0
  hl_signalled=$HPCLAUNCH_REQUEUE_SIGNAL
  : >"$HPCLAUNCH_REQUEUE_FLAG"
  if [ "$hl_signal_ranks_on" = yes ]; then
    hl_log "SIG$hl_signalled: the time limit is near; passing it on to every rank process (requeue.signal_ranks)"
    hl_signal_ranks "$hl_signalled"
  else
    hl_log "SIG$hl_signalled: the time limit is near; the ranks get no signal (requeue.signal_ranks: false): train_entry sees the flag and stops at its next step, other programs run on"
  fi
  if [ "$hl_requeue_by" = program ]; then
    hl_log "requeue is the program's (requeue.by: program): hpclaunch will not requeue; unless the program does, the job ends when its ranks do or at the time limit"
  elif [ $((HPCLAUNCH_ATTEMPT + 1)) -lt "$HPCLAUNCH_MAX_ATTEMPTS" ]; then
    hl_log "if the step then fails, hpclaunch requeues the job: attempt $((HPCLAUNCH_ATTEMPT + 1)) comes next (attempts are numbered from 0; requeue.max_attempts: $HPCLAUNCH_MAX_ATTEMPTS), and the program resumes from its own checkpoint if it keeps one; if every rank exits 0 it completes; a step still running at the limit ends TIMEOUT"
  else
    hl_log "attempt $HPCLAUNCH_ATTEMPT is the last (attempts are numbered from 0; requeue.max_attempts: $HPCLAUNCH_MAX_ATTEMPTS): if the step then fails the job ends GAVE_UP; if every rank exits 0 it completes"
  fi
}
hl_on_term() {
  hl_trapped=1
  hl_terminated=1
  hl_log "SIGTERM: the job is being stopped (cancelled, out of time, preempted or requeued); the ranks get SIGTERM too"
}

# --- the allocation and the rendezvous port ---
# hl_free_port FIRST BASE SPAN TRIES: FIRST if it can be bound on this host, else the next free one
# of the TRIES after it in [BASE, BASE+SPAN), else one the kernel picks (FIRST 0: the kernel's at once).
hl_free_port() {
  "$hl_python" -c 'import socket, sys
first, base, span, tries = (int(a) for a in sys.argv[1:])
def bind(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return None
        return s.getsockname()[1]
for i in range(tries):
    port = base + (first - base + i) % span
    port = bind(port) if port <= 65535 else None
    if port:
        break
else:
    port = bind(0)
print(port or "")' "$@" 2>/dev/null
}
# hl_choose_port BASE SPAN: the rendezvous port (hl_port): derived from the job id into the
# profile's range and checked free on this host (the head node: Slurm runs the batch script on the
# allocation's first node), else the next free one of the range. Under the local backend the kernel
# picks a free one: job ids restart in every registry, so two users' (or two HPCLAUNCH_HOMEs') jobs
# would derive the same port. $HPCLAUNCH_RDZV_PORT wins.
hl_port_base='' hl_port_span=''
hl_choose_port() {
  local base=$1 span=$2
  hl_port_base=$base hl_port_span=$span
  if [ -n "${HPCLAUNCH_RDZV_PORT:-}" ]; then
    hl_port=$HPCLAUNCH_RDZV_PORT
  elif [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    hl_port=$(hl_free_port 0 0 1 0)
  else
    hl_port=$(hl_free_port $(( base + SLURM_JOB_ID % span )) "$base" "$span" 32)
  fi
  [ -n "$hl_port" ] || hl_port=$(( base + SLURM_JOB_ID % span ))
}
# hl_begin: the allocation's hosts (hl_nodes) and head (hl_head: the first, with the profile's
# $hl_head_suffix), the rendezvous address exported, the attempt's start in the state file and log.
hl_begin() {
  mapfile -t hl_alloc < <(hl_hostnames)
  hl_place
  hl_state "start host=$(hostname) nodes=${#hl_nodes[@]} head=$hl_head port=$hl_port"
  hl_log "job ${SLURM_JOB_ID} attempt $HPCLAUNCH_ATTEMPT on ${hl_nodes[*]}${hl_spares[*]:+ (spare: ${hl_spares[*]})}; rank logs in $HPCLAUNCH_LOG_DIR"
}
# hl_place: the step's nodes (hl_nodes: the job's node count of the allocation's nodes, the fenced
# left out, the batch shell's node first) and spares (hl_spares), the head and the srun placement
# (hl_step_place). Returns 1 when fewer healthy nodes are left than the step needs.
hl_fenced=() hl_step_subset=''
hl_place() {
  local want=${hl_rec_nodes:-0} node me ok=() f
  me=$(hostname)
  for node in "${hl_alloc[@]}"; do
    for f in "${hl_fenced[@]}"; do [ "$f" = "$node" ] && continue 2; done
    if [ "$node" = "$me" ] || [ "$node" = "${me%%.*}" ]; then
      ok=("$node" "${ok[@]}")
      hl_batch_node=$node
    else
      ok+=("$node")
    fi
  done
  [ "$want" -gt 0 ] || want=${#hl_alloc[@]}
  [ "${#ok[@]}" -gt 0 ] || return 1
  hl_nodes=("${ok[@]:0:$want}")
  hl_spares=("${ok[@]:$want}")
  hl_head=${hl_nodes[0]}${hl_head_suffix:-}
  export HPCLAUNCH_MASTER_ADDR=$hl_head HPCLAUNCH_MASTER_PORT=$hl_port HPCLAUNCH_STEP_NODES=${#hl_nodes[@]}
  if [ "${#hl_nodes[@]}" -eq "${#hl_alloc[@]}" ]; then
    hl_step_place=(--nodes="${SLURM_JOB_NUM_NODES:-${#hl_nodes[@]}}") hl_step_subset=''
  else
    hl_step_place=(--nodes="${#hl_nodes[@]}" --nodelist="$(IFS=,; echo "${hl_nodes[*]}")") hl_step_subset=1
  fi
  [ "$hl_restarts" -eq 0 ] || hl_step_place+=(--overlap)
  [ "${#ok[@]}" -ge "$want" ]
}

# --- the rank wrapper ---
# Each rank's output goes to logs/attempt<N>/rank<R>.log and its exit code and time to rank<R>.exit
# (so `hpclaunch logs` can show the first rank that failed); "rank host pid" goes to ranks.tsv, one
# short line appended per rank (O_APPEND, one write: lines never interleave). Which variable holds
# the rank depends on the starter; signals the starter sends are passed on to the rank. Two shells:
# the outer one passes the signals on, the inner one (hpclaunch-rank-run, the same text) is the
# rank's parent and waits for it in the foreground, where bash keeps the status even when a signal
# comes in the same instant (its trap runs after the rank ends). An outer shell waiting in the
# background lost the code of a rank ending of a step-wide signal 10 times in 200 (it wrote 128+S).
# bash tells of a child a signal killed on the stderr of the shell that waited ("hpclaunch-rank-run:
# line 8: 123 Segmentation fault ( printf ...; exec "$@" )"): that shell's own stderr goes to
# .rank<R>.wait while it waits (the rank's own goes to the log, through the fd hl_e), and a message
# there means the rank was killed: the log gets one line in hpclaunch's words instead. A command not
# found in PATH is said the same way (bash: "hpclaunch-rank-run: line 9: exec: pythn: not found").
# The wrapper travels as text (bash -c), so it runs where the starter runs it: another node, a container.
hl_rank_body='hl_r=${RANK:-${HOROVOD_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}}}}}
if [ "$0" = hpclaunch-rank-run ]; then
  trap : TERM HUP USR1 USR2
  hl_w=$HPCLAUNCH_LOG_DIR/.rank$hl_r.wait
  { (exec 2>&"$hl_e" {hl_e}>&-
    printf "%s\t%s\t%s\n" "$hl_r" "$1" "$BASHPID" >>"$HPCLAUNCH_LOG_DIR/ranks.tsv"
    shift
    case $1 in */*) ;; *) command -v -- "$1" >/dev/null || { printf "hpclaunch: %s: command not found\n" "$1" >&2; exit 127; } ;; esac
    exec "$@"); } {hl_e}>&2 2>"$hl_w"
  hl_rc=$?
  exec {hl_e}>&-
  if [ -s "$hl_w" ] && [ "$hl_rc" -gt 128 ] && hl_s=$(kill -l "$hl_rc" 2>/dev/null); then
    case $hl_s in
      SEGV) hl_s="SIGSEGV (a segmentation fault: an invalid memory access)" ;;
      ABRT) hl_s="SIGABRT (an abort: abort(), a failed assertion or an uncaught C++ exception)" ;;
      KILL) hl_s="SIGKILL (not catchable: the out-of-memory killer, Slurm after a SIGTERM, or a person)" ;;
      BUS) hl_s="SIGBUS (a bus error)" ;; FPE) hl_s="SIGFPE (an arithmetic error)" ;;
      ILL) hl_s="SIGILL (an illegal instruction)" ;; *) hl_s=SIG$hl_s ;;
    esac
    grep -q "core dumped" "$hl_w" && hl_s="$hl_s, core dumped"
    printf "hpclaunch: rank %s was killed by %s; exit code %s\n" "$hl_r" "$hl_s" "$hl_rc" >&2
  fi
  rm -f -- "$hl_w"
  # The time from bash itself: a date(1) forked as a step-wide SIGTERM lands dies of it, and the
  # file then had no time. EPOCHREALTIME (bash >= 5) has the decimal mark of the locale.
  hl_t=${EPOCHREALTIME:-$(date +%s.%N)}
  printf "%s %s\n" "$hl_rc" "${hl_t/,/.}" >"$HPCLAUNCH_LOG_DIR/rank$hl_r.exit"
  exit "$hl_rc"
fi
hl_h=$(hostname)
bash -c "$BASH_EXECUTION_STRING" hpclaunch-rank-run "$hl_h" "$@" >>"$HPCLAUNCH_LOG_DIR/rank$hl_r.log" 2>&1 &
hl_c=$!
hl_pass() {
  local n=0 p a b q
  while kill -0 "$hl_c" 2>/dev/null; do
    p=
    [ -e "$HPCLAUNCH_LOG_DIR/ranks.tsv" ] && while read -r a b q; do
      [ "$a" = "$hl_r" ] && [ "$b" = "$hl_h" ] && p=$q
    done <"$HPCLAUNCH_LOG_DIR/ranks.tsv"
    [ -n "$p" ] && { kill -s "$1" "$p" 2>/dev/null; return; }
    n=$((n + 1)); [ "$n" -lt 500 ] || return; sleep 0.01
  done
}
for hl_s in TERM HUP USR1 USR2; do trap "hl_pass $hl_s" "$hl_s"; done
while kill -0 "$hl_c" 2>/dev/null; do wait "$hl_c"; done
wait "$hl_c"
hl_rc=$?
hl_x=
[ -e "$HPCLAUNCH_LOG_DIR/rank$hl_r.exit" ] && read -r hl_x _ <"$HPCLAUNCH_LOG_DIR/rank$hl_r.exit"
case $hl_x in ""|*[!0-9]*) ;; *) hl_rc=$hl_x ;; esac
exit "$hl_rc"'
# Launchers put it before the rank's command: "${hl_rank_log[@]}" "${hl_ctr[@]}" "${hl_cmd[@]}".
hl_rank_log=(bash -c "$hl_rank_body" hpclaunch-rank)
# A container's words before the rank's command, and its options to the step: none unless the script
# (templates/container.j2) sets them.
hl_ctr=()
hl_ctr_opts=()

# Ray's and TensorFlow's launches live beside this file (a module of its own, as each does in Python).
. "${BASH_SOURCE[0]%/*}/frameworks.sh"

# --- the monitor: one sampler per node, beside the ranks (it never holds their CPUs) ---
hl_monitor_pid='' hl_monitor_opts=() hl_monitor_deferred=''
# hl_monitor_start [SRUN_OPTION...]: starts the script's hl_monitor command (SRUN_OPTION: the job's
# GPU request, so that the step sees the job's GPUs: where cgroups confine devices, NVML sees only those).
# On Slurm, called before the ranks' step is launched (as the script does), it only notes the request:
# hl_launch_step starts the monitors right after the ranks' step (hl_side_steps). Started first, the
# monitor's step (and the watch's) reached the nodes first and their Pythons started while the ranks'
# step waited: at 32 nodes of the test cluster the ranks ran 2.7 s after their srun, against 0.3 s
# without them (docs/bench/scale-cluster-start.md).
hl_monitor_start() {
  if [ -z "${HPCLAUNCH_LOCAL:-}" ] && [ -z "${hl_step_pid:-}" ] && [ -z "$hl_monitor_deferred" ]; then
    hl_monitor_opts=("$@") hl_monitor_deferred=1
    return 0
  fi
  hl_monitor_deferred=''
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    "${hl_monitor[@]}" --parent-pid $$ >>"$HPCLAUNCH_LOG_DIR/monitor.log" 2>&1 &
  else
    # --ntasks: else srun takes the job's SLURM_NTASKS (nodes x tasks a node) over --ntasks-per-node=1,
    # and runs a monitor per rank, all writing one node's logs.
    # Named: hl_stop_monitor finds the step by its name to stop it (see there).
    # --no-kill: a node that dies does not stop the other nodes' monitors (docs/recovery.md).
    srun --overlap --no-kill --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=0 \
      --job-name=hpclaunch-monitor "$@" "${hl_monitor[@]}" >>"$HPCLAUNCH_LOG_DIR/monitor.log" 2>&1 &
  fi
  hl_monitor_pid=$!
}
hl_stop_monitor() {
  local step='' energy
  [ -n "$hl_monitor_pid" ] || return 0
  # On Slurm, SIGTERM to the monitor's srun makes srun SIGKILL its tasks: the monitors would take no
  # final sample (the energy counters' closing values) nor serve it to Prometheus. scancel -s
  # gives each monitor the SIGTERM itself; srun's pid is the fallback.
  if [ -z "${HPCLAUNCH_LOCAL:-}" ]; then
    step=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null | awk '$2 == "hpclaunch-monitor" { print $1; exit }')
  fi
  if [ -z "$step" ] || ! scancel -s TERM "$step" 2>/dev/null; then
    kill -TERM "$hl_monitor_pid" 2>/dev/null
  fi
  # A monitor takes a final sample and stops within seconds; srun waits for a dead node's task until
  # the scheduler gives up on the node (SlurmdTimeout), so it is not waited for that long.
  hl_wait_at_most "$hl_monitor_pid" 30 || kill -KILL "$hl_monitor_pid" 2>/dev/null
  hl_wait "$hl_monitor_pid"
  # The logs are final: this step leaves their columnar copies, which the user's reports read instead
  # of parsing every CSV again, and answers the measured energy, for the job's Slurm record
  # (sacct -o AdminComment) as jobstats does; AdminComment needs an operator, so a user's job falls
  # back to Comment. Never fails the job.
  if energy=$(timeout 60 "$hl_python" -m hpclaunch.reports.slurm_comment "$HPCLAUNCH_RUN_DIR" 2>/dev/null) &&
    [ -z "${HPCLAUNCH_LOCAL:-}" ]; then
    scontrol update job="$SLURM_JOB_ID" AdminComment="$energy" 2>/dev/null ||
      scontrol update job="$SLURM_JOB_ID" Comment="$energy" 2>/dev/null ||
      hl_log "the energy line could not be written to the job's Slurm record"
  fi
}

# --- end of attempt: stop the monitor, then finish, requeue or give up ---
# hl_decide RC: what the attempt's end is (in hl_outcome): completed, stopped (by SIGTERM: left to
# Slurm), requeued, gave_up or failed. Success is never requeued: every rank exited 0, whatever
# signal came before. With requeue.by: program, requeueing is the program's (scontrol requeue) and a
# failed step is a failure. Else the step is requeued if the time-limit signal came, or a rank asked
# with exit code $HPCLAUNCH_REQUEUE_EXIT; train_entry also leaves a marker, since torchrun and
# horovodrun report any failed rank as their own exit code 1, and its `finished` marker means the
# work is done. A rank's own code counts too (its rank<R>.exit, hl_asked): when one rank exits
# $HPCLAUNCH_REQUEUE_EXIT first, srun kills the others and reports their 143 as the step's code.
hl_asked=
hl_rank_asked() {
  local f c _t
  for f in "$HPCLAUNCH_LOG_DIR"/rank*.exit; do
    [ -f "$f" ] && read -r c _t <"$f" && [ "$c" = "$HPCLAUNCH_REQUEUE_EXIT" ] || continue
    f=${f##*/rank}; hl_asked=${f%.exit}; return 0
  done
  return 1
}
hl_decide() {
  local rc=$1 marks=$HPCLAUNCH_RUN_DIR/.hpclaunch
  hl_asked=
  if [ "$rc" -eq 0 ]; then
    hl_outcome=completed
  elif [ -n "$hl_terminated" ]; then
    hl_outcome=stopped
  elif [ "$hl_requeue_by" != program ] &&
    { [ -n "$hl_signalled" ] || [ "$rc" -eq "$HPCLAUNCH_REQUEUE_EXIT" ] || [ -e "$marks/requeue-exit.attempt$HPCLAUNCH_ATTEMPT" ] || hl_rank_asked; } &&
    [ ! -e "$marks/finished" ]; then
    if [ $((HPCLAUNCH_ATTEMPT + 1)) -lt "$HPCLAUNCH_MAX_ATTEMPTS" ]; then hl_outcome=requeued; else hl_outcome=gave_up; fi
  else
    hl_outcome=failed
  fi
}
# hl_end STEP_PID: waits for the job step (the launcher's, just started), then ends the attempt as
# hl_decide says: its state line and log line, the requeue, and the script's exit code.
hl_end() {
  local rc
  hl_wait "$1"
  rc=$?
  hl_stop_monitor
  hl_decide "$rc"
  hl_conclude "$rc"
}
# hl_conclude RC: the attempt's end as $hl_outcome says: its state line and log line, the requeue,
# and the script's exit code.
hl_conclude() {
  local rc=$1
  if [ -n "$hl_asked" ] && [ "$rc" != "$HPCLAUNCH_REQUEUE_EXIT" ]; then
    # the attempt ended because rank $hl_asked asked: its code is the attempt's, not the peers' 143
    hl_log "rank $hl_asked exited $HPCLAUNCH_REQUEUE_EXIT (requeue me); the step's exit code $rc is its peers', stopped after it"
    rc=$HPCLAUNCH_REQUEUE_EXIT
  fi
  hl_state "end rc=$rc outcome=$hl_outcome"
  case $hl_outcome in
    completed)
      [ -z "$hl_signalled" ] || hl_log "every rank exited 0 after SIG$hl_signalled: the job completed, no requeue"
      exit 0 ;;
    stopped)
      hl_log "the step ended with exit code $rc after SIGTERM (cancelled, out of time, preempted$([ "$hl_requeue_by" != program ] || echo ' or requeued by the program'))" ;;
    requeued)
      hl_log "requeueing (step exit code $rc): attempt $((HPCLAUNCH_ATTEMPT + 1)) comes next (numbered from 0; requeue.max_attempts: $HPCLAUNCH_MAX_ATTEMPTS); the program resumes from its own checkpoint if it keeps one (hpclaunch keeps none for it)"
      if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
        : >"$HPCLAUNCH_RUN_DIR/.hpclaunch/requeue"
      elif ! scontrol requeue "$SLURM_JOB_ID"; then
        hl_log "scontrol requeue failed; the job ends here"
        exit "$rc"
      fi
      exit 0 ;;
    gave_up)
      hl_log "giving up: $HPCLAUNCH_MAX_ATTEMPTS attempts used (requeue.max_attempts)" ;;
    *)
      hl_log "the job step failed with exit code $rc; rank logs in $HPCLAUNCH_LOG_DIR (hpclaunch logs ${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID})" ;;
  esac
  exit "$rc"
}

# Recovery inside the allocation (hl_recovery, hl_supervise, ...) lives beside this file.
. "${BASH_SOURCE[0]%/*}/recovery.sh"
