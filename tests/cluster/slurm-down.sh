#!/usr/bin/env bash
# slurm-down.sh: tear down the test cluster that tests/cluster/slurm-up.sh started.
#
#   tests/cluster/slurm-down.sh [-d STATEDIR]      (default /tmp/hpclaunch-slurm)
#
# Idempotent: safe to call when nothing (or only half a cluster) is up, so CI can call it from a
# `trap ... EXIT` unconditionally. It only stops what slurm-up.sh started: daemons by the pid files in
# STATEDIR/run, processes inside the snN namespaces, and munged/MariaDB only if STATEDIR/started.* says
# slurm-up.sh started them. Logs stay in STATEDIR/log for post-mortems; the next slurm-up.sh wipes them.
set -euo pipefail

STATEDIR=/tmp/hpclaunch-slurm
usage() { sed -n '2,4p' "${BASH_SOURCE[0]}" >&2; exit 2; }
log() { echo "slurm-down: $*" >&2; }

while getopts "d:h" opt; do
    case $opt in
        d) STATEDIR=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || usage
[[ $STATEDIR == /* && $STATEDIR != / ]] || { log "ERROR: -d must be an absolute path"; exit 2; }
STATEDIR=${STATEDIR%/}
(( EUID == 0 )) || { log "ERROR: must run as root"; exit 1; }

CONF=$STATEDIR/slurm.conf
BRIDGE=br-slurm
HOSTS_TAG="# hpclaunch-slurm-test"
export SLURM_CONF=$CONF

# Same lock as slurm-up.sh: never tear down while another caller is half-way through bringing it up.
# (slurm-up.sh calls us while holding it and says so with HPCLAUNCH_SLURM_LOCKED=1.)
if [[ ${HPCLAUNCH_SLURM_LOCKED:-0} != 1 ]]; then
    exec 9>/tmp/hpclaunch-slurm.lock
    flock -w 120 9 || { log "ERROR: could not get /tmp/hpclaunch-slurm.lock within 120 s"; exit 1; }
fi
T0=$(date +%s.%N)

# A killed daemon stays <defunct> for seconds because PID 1 here reaps lazily, and `kill -0` succeeds on
# a zombie (gotcha 12): treat zombies as gone.
pid_alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]]
}

# TERM the given pids, wait up to 15 s, then KILL what is left and wait again.
stop_pids() {
    local pid left deadline
    (( $# )) || return 0
    for pid in "$@"; do pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true; done
    deadline=$((SECONDS + 15))
    while :; do
        left=()
        for pid in "$@"; do pid_alive "$pid" && left+=("$pid"); done
        (( ${#left[@]} )) || return 0
        if (( SECONDS >= deadline )); then
            log "SIGKILL to ${left[*]}"
            kill -KILL "${left[@]}" 2>/dev/null || true
            sleep 0.5
            return 0
        fi
        sleep 0.1
    done
}

pid_of() { [[ -s $1 ]] && cat "$1" 2>/dev/null || true; }

# ----------------------------------------------------------------------------------------------------
# 1. Jobs first: slurmstepd of running jobs would otherwise outlive slurmd and keep the namespaces busy.
# ----------------------------------------------------------------------------------------------------
CTLD_PID=$(pid_of "$STATEDIR/run/slurmctld.pid")
if [[ -r $CONF ]] && pid_alive "${CTLD_PID:-x}" && timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; then
    mapfile -t JOBS < <(timeout 10 squeue -h -o '%A' 2>/dev/null || true)
    if (( ${#JOBS[@]} )); then
        log "cancelling ${#JOBS[@]} job(s)"
        timeout 10 scancel "${JOBS[@]}" 2>/dev/null || true
        deadline=$((SECONDS + 20))
        while [[ -n $(timeout 5 squeue -h -o '%A' 2>/dev/null || true) ]] && (( SECONDS < deadline )); do
            sleep 0.2
        done
    fi
    # Stops slurmctld and every registered slurmd in one go (~0.1 s).
    timeout 10 scontrol shutdown >/dev/null 2>&1 || true
fi

# ----------------------------------------------------------------------------------------------------
# 2. Whatever is left, by pid file (scontrol shutdown removes the files of the daemons it stopped, so
#    read them now, and also use the ctld pid read above) and by namespace membership: everything inside
#    an snN namespace (slurmd, slurmstepd, job tasks) belongs to this cluster.
# ----------------------------------------------------------------------------------------------------
PIDS=()
[[ -n $CTLD_PID ]] && PIDS+=("$CTLD_PID")
for f in "$STATEDIR"/run/slurmd-*.pid "$STATEDIR"/run/slurmctld.pid; do
    [[ -e $f ]] || continue
    p=$(pid_of "$f"); [[ -n $p ]] && PIDS+=("$p")
done
NETNS=()
for f in /run/netns/sn*; do
    [[ -e $f && $(basename "$f") =~ ^sn[0-9]+$ ]] && NETNS+=("$(basename "$f")")
done
for ns in "${NETNS[@]}"; do
    while read -r p; do [[ -n $p ]] && PIDS+=("$p"); done < <(ip netns pids "$ns" 2>/dev/null || true)
done
stop_pids "${PIDS[@]}"

# slurmdbd after slurmctld, so the controller can flush its last job records into the database.
DBD_PID=$(pid_of "$STATEDIR/run/slurmdbd.pid")
[[ -n $DBD_PID ]] && stop_pids "$DBD_PID"

# ----------------------------------------------------------------------------------------------------
# 3. Shared services, only if slurm-up.sh started them (another user of munge/MariaDB keeps them).
# ----------------------------------------------------------------------------------------------------
if [[ -e $STATEDIR/started.mariadb ]]; then
    p=$(pid_of /run/mysqld/mysqld.pid)
    if [[ -n $p ]]; then log "stopping MariaDB ($p)"; stop_pids "$p"; fi
    rm -f "$STATEDIR/started.mariadb"
fi
if [[ -e $STATEDIR/started.munge ]]; then
    p=$(pid_of /run/munge/munged.pid)
    if [[ -n $p ]]; then log "stopping munged ($p)"; stop_pids "$p"; fi
    rm -f "$STATEDIR/started.munge"
fi

# ----------------------------------------------------------------------------------------------------
# 4. Network, /etc/hosts, cgroups.
# ----------------------------------------------------------------------------------------------------
for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || log "could not delete netns $ns"; done
# The veth host ends die with their namespaces; the bridge does not.
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
# The ARP table's bounds slurm-up.sh raised for a large cluster: back to what they were
if [[ -f $STATEDIR/neigh.saved ]] && read -r g1 g2 g3 < "$STATEDIR/neigh.saved"; then
    NEIGH=/proc/sys/net/ipv4/neigh/default
    { echo "$g3" > "$NEIGH/gc_thresh3" && echo "$g2" > "$NEIGH/gc_thresh2" && echo "$g1" > "$NEIGH/gc_thresh1"; } 2>/dev/null ||
        log "could not restore the ARP table's bounds ($g1 $g2 $g3)"
    rm -f -- "$STATEDIR/neigh.saved"
fi
if grep -q -- "$HOSTS_TAG" /etc/hosts 2>/dev/null; then
    # In place (no mv): /etc/hosts may be a bind mount.
    HOSTS_NEW=$(grep -v -- "$HOSTS_TAG" /etc/hosts || true)
    printf '%s\n' "$HOSTS_NEW" > /etc/hosts
fi
# slurmd (and task/cgroup, if ever enabled) leaves empty per-node dirs such as freezer/slurm_c1 behind.
# rmdir only removes empty ones, deepest first, so nothing with live tasks is touched.
for d in /sys/fs/cgroup/slurm_c* /sys/fs/cgroup/*/slurm_c*; do
    [[ -d $d && $(basename "$d") =~ ^slurm_c[0-9]+$ ]] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

rm -f "$STATEDIR/cluster.id" "$STATEDIR/env.sh" "$STATEDIR/nodes" "$STATEDIR"/run/*.pid 2>/dev/null || true
log "down ($STATEDIR) in $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
