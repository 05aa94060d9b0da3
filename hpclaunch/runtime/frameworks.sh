# hpclaunch's job runtime, its frameworks part: the launches that are more than a step (Ray's cluster
# per job, TensorFlow's workers). job.sh sources it (same folder, same runtime version); its
# functions use job.sh's (hl_log, hl_state, hl_step, hl_free_port, ...). Tested with job.sh by
# tests/test_job_runtime.py and on the cluster by tests/test_frameworks_cluster.py.
# --- Ray (launcher: ray): a Ray cluster per job ---
# hl_ray NODES CPUS GPUS [GPU_REQUEST...], in the background (`hl_ray ... &`): the Ray head on the
# first node and one worker on every other node, each with the node's share of the allocation (CPUS,
# GPUS; GPU_REQUEST: the srun options that give a node's step its GPUs); the job's command is the
# driver, on the head node, with RAY_ADDRESS set. Returns the driver's exit code (1: Ray did not
# come up on NODES nodes, or the job's Ray token could not be written). Each node's `ray start
# --block` runs in a session of its own: on SIGTERM it stops what it started, and anything left in
# that session is then killed.
hl_ray() {
  local nodes=$1 step rc i
  # ip_head too: Ray's own Slurm example (doc_code/simple-trainer.py) reads ray.init(address=os.environ["ip_head"]).
  export RAY_ADDRESS=$hl_head:$hl_port ip_head=$hl_head:$hl_port RAY_USAGE_STATS_ENABLED=0
  # One authentication mode and one token for every Ray process of the job. Ray (2.5x+) turns token
  # authentication on where it finds a token (~/.ray/auth_token, which any local ray.init() leaves),
  # and then the job's own head, workers and driver disagreed (InvalidAuthToken): a token of the job's
  # own, in its private run directory, which every node sees. A job that sets RAY_AUTH_MODE keeps it.
  if [ -z "${RAY_AUTH_MODE+set}" ]; then
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$HPCLAUNCH_RUN_DIR/.hpclaunch/ray-auth-token
    [ -s "$RAY_AUTH_TOKEN_PATH" ] || (umask 077; set -C; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$RAY_AUTH_TOKEN_PATH") ||
      { hl_log "cannot write the job's Ray token at $RAY_AUTH_TOKEN_PATH"; return 1; }
  fi
  export HL_RAY_HEAD=$hl_head HL_RAY_PORT=$hl_port HL_RAY_CPUS=$2 HL_RAY_GPUS=$3
  # Short: Ray's socket paths must fit in 107 bytes. Per job and attempt: two jobs on a node never share it.
  export HL_RAY_TMP=/tmp/hpclaunch-ray-$(id -u)-$SLURM_JOB_ID-$HPCLAUNCH_ATTEMPT
  export HL_RAY_STOP=$HPCLAUNCH_LOG_DIR/ray-stop
  export hl_python
  export -f hl_free_port
  shift 3
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    SLURM_NODEID=0 bash -c "$hl_ray_node" hpclaunch-ray &
  else
    srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="$HL_RAY_CPUS" "$@" --kill-on-bad-exit=0 bash -c "$hl_ray_node" hpclaunch-ray &
  fi
  step=$!
  if hl_ray_wait "$nodes" >>"$HPCLAUNCH_LOG_DIR/ray-$(hostname).log" 2>&1; then
    hl_log "Ray is up on $nodes node(s) at $RAY_ADDRESS; the driver starts"
    SLURM_PROCID=0 "${hl_rank_log[@]}" "${hl_cmd[@]}"
    rc=$?
  else
    rc=1
    hl_log "Ray did not come up on every node; see $HPCLAUNCH_LOG_DIR/ray-*.log"
  fi
  : >"$HL_RAY_STOP"
  # Every node's Ray stops within seconds (within Ray's drain, if the job set one); a step still
  # running after 60 s is ended.
  for ((i = 0; i < 120; i++)); do kill -0 "$step" 2>/dev/null || break; sleep 0.5; done
  kill -TERM "$step" 2>/dev/null
  wait "$step"
  return "$rc"
}
# One node's Ray (the text each node's task runs: bash -c), until the driver's end.
hl_ray_node='log=$HPCLAUNCH_LOG_DIR/ray-$(hostname).log
# Ray fixes this port by default (52365): two Ray jobs on one node would collide.
opts=(--block --temp-dir="$HL_RAY_TMP" --num-cpus="$HL_RAY_CPUS" --num-gpus="$HL_RAY_GPUS" --disable-usage-stats
      --dashboard-agent-listen-port="$(hl_free_port 0 0 1 0)")
if [ "${SLURM_NODEID:-0}" = 0 ]; then
  opts+=(--head --port="$HL_RAY_PORT" --include-dashboard=false)
else
  # a worker joins once the head listens (up to 2 minutes)
  for i in $(seq 240); do (exec 3<>"/dev/tcp/$HL_RAY_HEAD/$HL_RAY_PORT") 2>/dev/null && break; sleep 0.5; done
  opts+=(--address="$HL_RAY_HEAD:$HL_RAY_PORT")
fi
# Newer Ray (2.60) drains a node on SIGTERM for up to 30 s, for Serve. The driver has ended by then,
# and the actors Ray Train leaves held the head for all 30 s: 0 stops at once (a job may set its own).
RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=${RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S-0} setsid ray start "${opts[@]}" >>"$log" 2>&1 &
rp=$!
trap "kill -TERM $rp 2>/dev/null" TERM INT
# The driver ended when the stop file appears (the run directory is shared): stop Ray gracefully
# (killing srun instead would SIGKILL `ray start` and orphan what it started).
while kill -0 "$rp" 2>/dev/null && [ ! -e "$HL_RAY_STOP" ]; do sleep 0.5; done
kill -TERM "$rp" 2>/dev/null
while kill -0 "$rp" 2>/dev/null; do wait "$rp"; done
pkill -KILL -s "$rp" 2>/dev/null
rm -rf -- "$HL_RAY_TMP"
exit 0'
# hl_ray_wait N: until N nodes have joined, at most 3 minutes (a Ray driver connection that only counts)
hl_ray_wait() {
  local i
  for ((i = 0; i < 360; i++)); do
    (exec 3<>"/dev/tcp/$hl_head/$hl_port") 2>/dev/null && break
    sleep 0.5
  done
  "$hl_python" -c 'import sys, time
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.time() + 180
while sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[2]):
    if time.time() > deadline:
        sys.exit("hpclaunch: only %d of %s Ray nodes joined in 3 minutes" % (sum(n["Alive"] for n in ray.nodes()), sys.argv[2]))
    time.sleep(0.5)' "$RAY_ADDRESS" "$1"
}

# --- TensorFlow (launcher: tensorflow): multi-worker ---
# hl_tensorflow TASKS_PER_NODE CPUS_PER_TASK [HOST_SUFFIX], in the background (`hl_tensorflow ... &`):
# one job step, srun starting one worker per rank (TASKS_PER_NODE per node), each under the rank
# wrapper with TF_CONFIG naming every worker (host HOST_SUFFIX:port; ports from the job's rendezvous
# port up) and its own index (SLURM_PROCID), so tf.distribute.MultiWorkerMirroredStrategy() needs no
# arguments. Those ports must be free on every node, not only on the head where the rendezvous port
# was checked: one task per node lists the candidate bases whose TASKS_PER_NODE ports it can all
# bind, and the first base every node lists is used (else the rendezvous port, said in the batch log).
hl_tensorflow() {
  local tpn=$1 bases=() free base h i workers=()
  for ((i = 0; i < 16; i++)); do bases+=($(( hl_port + i * tpn ))); done
  if [ -n "${HPCLAUNCH_LOCAL:-}" ]; then
    free=$("$hl_python" -c "$hl_tf_ports" "$tpn" "${bases[@]}")
  else
    free=$(srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=1 \
      "$hl_python" -c "$hl_tf_ports" "$tpn" "${bases[@]}")
  fi
  base=$(printf '%s\n' "$free" | "$hl_python" -c 'import sys
lines = [set(l.split()) for l in sys.stdin.read().splitlines()]
common = set.intersection(*lines) if lines else set()
print(min(common, key=int) if common else "")')
  if [ -n "$base" ]; then
    [ "$base" = "$hl_port" ] || hl_log "TensorFlow workers: ports from $hl_port are taken on some node; using $base"
    hl_port=$base
  else
    hl_log "TensorFlow workers: no base port of ${bases[0]}..${bases[-1]} is free on every node; trying $hl_port"
  fi
  for h in "${hl_nodes[@]}"; do
    for ((i = 0; i < tpn; i++)); do workers+=("\"$h${3-}:$((hl_port + i))\""); done
  done
  export HPCLAUNCH_TF_WORKERS
  HPCLAUNCH_TF_WORKERS=$(IFS=,; printf '%s' "${workers[*]}")
  hl_step "$tpn" --cpus-per-task="$2" --kill-on-bad-exit=1 "${hl_ctr_opts[@]}" -- \
    bash -c "$hl_tf_config" hpclaunch-tf "${hl_rank_log[@]}" "${hl_ctr[@]}" "${hl_cmd[@]}"
}
# The bases (argv[2:]) whose argv[1] ports from each this node can all bind.
hl_tf_ports='import socket, sys
tpn, bases = int(sys.argv[1]), [int(b) for b in sys.argv[2:]]
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True
print(" ".join(str(b) for b in bases if all(b + i <= 65535 and free(b + i) for i in range(tpn))))'
hl_tf_config='export TF_CONFIG="{\"cluster\": {\"worker\": [$HPCLAUNCH_TF_WORKERS]}, \"task\": {\"type\": \"worker\", \"index\": ${SLURM_PROCID:-0}}}"; exec "$@"'
