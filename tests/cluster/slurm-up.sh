#!/usr/bin/env bash
# slurm-up.sh: bring up a throwaway, REAL Slurm cluster on this one machine for hpclaunch's tests.
#
#   tests/cluster/slurm-up.sh [-n NODES] [-c CPUS_PER_NODE] [-d STATEDIR] [-a dbd|none]
#   tests/cluster/slurm-up.sh -k [-d STATEDIR]    # only check the running cluster: exit 0 if healthy, else 1
#
# What it builds (see tests/cluster/README.md for the why and the timings):
#   munged -> (MariaDB -> slurmdbd) -> slurmctld on the host -> one slurmd per node, each node in its
#   own network + UTS namespace (hostname cI, address 10.200.0.(10+I) on bridge br-slurm 10.200.0.1/24),
#   plus an sshd per node that takes root with the key STATEDIR/ssh/id_ed25519 (for horovodrun).
#
# Contract with callers (CI, tests/cluster/fixture.py):
#   * stdout carries exactly ONE line at the end: `export SLURM_CONF=<STATEDIR>/slurm.conf`;
#     everything else goes to stderr, so `eval "$(slurm-up.sh)"` is safe.
#   * idempotent: if the same cluster (same statedir/nodes/cpus/accounting) is already up and healthy,
#     it only prints the export line.
#   * it never clobbers a cluster it did not start, or one of ours with other settings: it exits 3 and
#     says to run slurm-down.sh first. Slurm's ports (6817 ctld, 6818 slurmd, 6819 dbd) are fixed, so there
#     can only be one cluster per machine.
#   * it needs root (namespaces, /etc/hosts, daemons running as root) and no systemd.
#   * healthy = the controller answers, every node is up (idle, mixed or allocated: busy is healthy), every
#     node's sshd listens, and the MPI plugin the testcluster profile uses (srun --mpi=pmix) can load.
#     -k prints what is wrong (stderr) and changes nothing, takes no lock.
set -euo pipefail

NODES=2
CPUS=""            # default depends on NODES, see below
STATEDIR=/tmp/hpclaunch-slurm
ACCT=dbd
# Everything here is measured on a 2-core VM: 16 nodes come up in a few seconds, but give them more room.
READY_TIMEOUT=${SLURM_UP_TIMEOUT:-90}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
    sed -n '2,6p' "${BASH_SOURCE[0]}" >&2
    exit 2
}
log() { echo "slurm-up: $*" >&2; }
die() { echo "slurm-up: ERROR: $*" >&2; exit 1; }

CHECK_ONLY=0
NODES_GIVEN=0
while getopts "n:c:d:a:kh" opt; do
    case $opt in
        n) NODES=$OPTARG; NODES_GIVEN=1 ;;
        k) CHECK_ONLY=1 ;;
        c) CPUS=$OPTARG ;;
        d) STATEDIR=$OPTARG ;;
        a) ACCT=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || usage

# Node I gets 10.200.0.(10+I); keep well inside the /24 and inside what 2 cores can carry.
[[ $NODES =~ ^[0-9]+$ ]] && (( NODES >= 1 && NODES <= 64 )) || die "-n must be 1..64 (got '$NODES')"
# The scale test runs 16 nodes on 2 real cores: 4 CPUs each would advertise 64 "cores" and invite tests
# to oversubscribe the VM 32x, so above 8 nodes the default drops to 2 (config_overrides allows either).
if [[ -z $CPUS ]]; then
    if (( NODES > 8 )); then CPUS=2; else CPUS=4; fi
fi
[[ $CPUS =~ ^[0-9]+$ ]] && (( CPUS >= 1 && CPUS <= 256 )) || die "-c must be 1..256 (got '$CPUS')"
[[ $ACCT == dbd || $ACCT == none ]] || die "-a must be dbd or none (got '$ACCT')"
# The statedir gets its subfolders wiped on a fresh start: insist on an absolute, non-trivial path so a
# typo cannot point that at / or a home directory.
[[ $STATEDIR == /* && $STATEDIR != / && $STATEDIR != *..* ]] || die "-d must be an absolute path (got '$STATEDIR')"
STATEDIR=${STATEDIR%/}
# -k checks the cluster as it runs: its node count is the one it was started with.
if (( CHECK_ONLY && ! NODES_GIVEN )) && [[ -s $STATEDIR/nodes ]]; then NODES=$(cat "$STATEDIR/nodes"); fi
(( EUID == 0 )) || die "must run as root (network namespaces, /etc/hosts, daemons as SlurmUser=root)"

CONF=$STATEDIR/slurm.conf
EXPORT_LINE="export SLURM_CONF=$CONF"
# The identity of a cluster: what callers ask for. Stored at start and compared on re-runs.
WANT_ID="statedir=$STATEDIR nodes=$NODES cpus=$CPUS acct=$ACCT"
BRIDGE=br-slurm
HOSTS_TAG="# hpclaunch-slurm-test"
CTLD_HOST=$(hostname -s)
export SLURM_CONF=$CONF

# One up/down at a time per machine: pytest-xdist workers or a CI retry could otherwise race on the
# fixed ports, the bridge and /etc/hosts.
# Every daemon started below is run with `9>&-`: a daemon that inherited fd 9 would hold the lock for its
# whole life and block the next up/down (flock locks belong to the open file, not to the process).
# -k only reads: it takes no lock (and so never waits for a start-up).
if (( ! CHECK_ONLY )); then
    exec 9>/tmp/hpclaunch-slurm.lock
    flock -w 120 9 || die "could not get /tmp/hpclaunch-slurm.lock within 120 s (another slurm-up/down running?)"
fi
# Our own nested slurm-down.sh calls must not wait for the lock we hold.
export HPCLAUNCH_SLURM_LOCKED=1

# ----------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------
port_busy() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# A pid from a pid file that is alive and not a zombie (PID 1 here reaps lazily: gotcha 12).
pid_alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/stat ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state != Z && $state != X ]]
}
pidfile_alive() { [[ -s $1 ]] && pid_alive "$(cat "$1" 2>/dev/null)"; }

# Polls "$@" every 0.1 s until it succeeds or $1 seconds pass.
wait_for() {
    local timeout=$1; shift
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        (( SECONDS < deadline )) || return 1
        sleep 0.1
    done
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
# All nodes idle (not idle* = not responding, not drained/down). Needs sinfo to answer at all.
all_idle() {
    local n
    n=$(sinfo -h -N -t idle -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
    (( n == NODES ))
}

log_tails() {
    local f
    for f in "$STATEDIR"/log/*.log /var/log/munge/munged.log "$STATEDIR"/log/mariadb.err; do
        [[ -s $f ]] || continue
        echo "----- tail of $f -----" >&2
        tail -n 25 "$f" >&2
    done
}

fail_with_logs() {
    echo "slurm-up: ERROR: $*" >&2
    log_tails
    echo "slurm-up: tearing the half-started cluster down (logs stay in $STATEDIR/log)" >&2
    "$HERE/slurm-down.sh" -d "$STATEDIR" >&2 9>&- || true
    exit 1
}

# Every node's sshd listens (a cluster started before sshd was part of it counts as unhealthy).
all_sshd_up() {
    local i
    for ((i = 1; i <= NODES; i++)); do
        nsenter --net="/run/netns/sn$i" ss -Hltn "sport = :22" 2>/dev/null | grep -q . || return 1
    done
}
# Every node responding and usable: idle, or mixed/allocated/completing while jobs run (a cluster busy with
# other tests' jobs is healthy; treating it as broken would make a caller tear it down under them). Down,
# drained or not responding (a `*` suffix) are not.
all_up() {
    local n
    n=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc|comp)$/' | sort -u | wc -l)
    (( n == NODES ))
}

# The MPI plugin the testcluster profile uses (mpi: {srun_mpi: pmix}). Slurm's mpi/pmix dlopens the
# unversioned libpmix.so from a directory compiled into it (Debian: /usr/lib/<arch>/pmix2/lib); only
# libpmix-dev ships that name. Without it the cluster looks fine and every `srun --mpi=pmix` step fails
# ("pmi/pmix: can not load PMIx library" in slurmd's log). Prints what is wrong; nothing when it can load.
MPI_PLUGIN=pmix
mpi_plugin_problem() {
    local listed plugdir so libdir found=0
    listed=$(srun --mpi=list 2>&1) || { echo "srun --mpi=list failed: ${listed//$'\n'/ }"; return; }
    if ! grep -qE "^[[:space:]]*$MPI_PLUGIN\$" <<<"$listed"; then
        echo "srun --mpi=list does not list $MPI_PLUGIN (got: $(tr -s '[:space:]' ' ' <<<"$listed"))"
        return
    fi
    plugdir=$(scontrol show config 2>/dev/null | awk -F' *= *' '$1 == "PluginDir" {print $2}')
    for so in "${plugdir:-/usr/lib/x86_64-linux-gnu/slurm-wlm}"/mpi_${MPI_PLUGIN}*.so; do
        [[ -e $so ]] || continue
        while read -r libdir; do
            [[ -n $libdir ]] || continue
            found=1
            [[ -e $libdir/lib$MPI_PLUGIN.so ]] \
                || { echo "$so loads $libdir/lib$MPI_PLUGIN.so, which is missing (install libpmix-dev)"; return; }
        done < <(grep -aoE "/[A-Za-z0-9_./-]*$MPI_PLUGIN[A-Za-z0-9_.-]*/lib" "$so" | sort -u)
    done
    (( found )) || { echo "no mpi_$MPI_PLUGIN plugin (with its library path) in ${plugdir:-PluginDir}"; return; }
    if grep -qs "can not load PMIx library" "$STATEDIR"/log/slurmd-*.log; then
        echo "slurmd could not load the PMIx library: $(grep -hs "can not load PMIx library" "$STATEDIR"/log/slurmd-*.log | tail -n 1)"
    fi
}
mpi_ok() { [[ -z $(mpi_plugin_problem) ]]; }
healthy() { ctld_up && all_up && all_sshd_up && mpi_ok; }

# -k: say what is wrong with the running cluster, change nothing.
if (( CHECK_ONLY )); then
    bad=0
    ctld_up || { log "unhealthy: slurmctld does not answer scontrol ping"; bad=1; }
    all_up || { log "unhealthy: not all $NODES nodes are up: $(sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ')"; bad=1; }
    all_sshd_up || { log "unhealthy: not every node's sshd listens"; bad=1; }
    problem=$(mpi_plugin_problem)
    [[ -z $problem ]] || { log "unhealthy: MPI plugin $MPI_PLUGIN: $problem"; bad=1; }
    (( bad )) || log "healthy: $NODES nodes, MPI plugin $MPI_PLUGIN loads ($STATEDIR)"
    exit "$bad"
fi

# ----------------------------------------------------------------------------------------------------
# 0. Is a cluster already there?
# ----------------------------------------------------------------------------------------------------
HAVE_ID=$(cat "$STATEDIR/cluster.id" 2>/dev/null || true)
# "Ours" = this statedir's settings file exists and one of its daemons is alive. Also counts a cluster
# whose slurmctld died but whose slurmdbd/slurmd live on: that one is ours to tear down, not foreign.
OURS=0
if [[ -n $HAVE_ID ]]; then
    for f in "$STATEDIR"/run/slurmctld.pid "$STATEDIR"/run/slurmdbd.pid "$STATEDIR"/run/slurmd-*.pid; do
        if pidfile_alive "$f"; then OURS=1; break; fi
    done
fi
if port_busy 6817 || port_busy 6819 || (( OURS )); then
    if (( OURS )) && [[ $HAVE_ID == "$WANT_ID" ]]; then
        if healthy; then
            log "cluster already up and healthy ($WANT_ID): reusing it"
            echo "$EXPORT_LINE" > "$STATEDIR/env.sh"
            echo "$EXPORT_LINE"
            exit 0
        fi
        # Ours, same settings, but not (yet) healthy: give it a moment (e.g. a second caller right after
        # start, or nodes still registering) before declaring it broken.
        if pidfile_alive "$STATEDIR/run/slurmctld.pid" && wait_for 20 healthy; then
            log "cluster up and healthy after waiting ($WANT_ID): reusing it"
            echo "$EXPORT_LINE" > "$STATEDIR/env.sh"
            echo "$EXPORT_LINE"
            exit 0
        fi
        echo "slurm-up: ERROR: the cluster in $STATEDIR is running but not healthy (scontrol ping / sinfo)." >&2
        echo "slurm-up: run: $HERE/slurm-down.sh -d $STATEDIR   and start again." >&2
        exit 3
    fi
    if (( OURS )); then
        echo "slurm-up: ERROR: a cluster started by this script is running with other settings:" >&2
        echo "slurm-up:   running:   ${HAVE_ID:-unknown}" >&2
        echo "slurm-up:   requested: $WANT_ID" >&2
        echo "slurm-up: refusing to clobber it; run: $HERE/slurm-down.sh -d $STATEDIR   first." >&2
        exit 3
    fi
    echo "slurm-up: ERROR: Slurm's ports are busy (6817 ctld and/or 6819 dbd), but not by a cluster this" >&2
    echo "slurm-up: script started in $STATEDIR. Refusing to clobber it. Listening:" >&2
    ss -Hltnp 'sport = :6817 or sport = :6819' >&2 || true
    echo "slurm-up: if it is ours under another statedir, run slurm-down.sh -d THAT_DIR." >&2
    exit 3
fi

# Nothing of ours is running, but an earlier run may have died half-way (namespaces, bridge, hosts lines,
# a slurmd without its controller). Clear that before building: the down script is idempotent.
if [[ -e $STATEDIR/cluster.id ]] || ip link show "$BRIDGE" >/dev/null 2>&1 || ls /run/netns/sn* >/dev/null 2>&1; then
    log "cleaning leftovers of an earlier run"
    "$HERE/slurm-down.sh" -d "$STATEDIR" >&2 9>&- || true
fi
port_busy 6818 && die "port 6818 (slurmd) is busy: another slurmd runs on this machine; refusing to start"

T0=$(date +%s.%N)

# ----------------------------------------------------------------------------------------------------
# 1. Packages. CI machines are fresh; locally they are usually there, so only touch apt when needed.
# ----------------------------------------------------------------------------------------------------
# libpmix-dev: the unversioned libpmix.so that mpi/pmix dlopens (see mpi_plugin_problem).
PKGS=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins openmpi-bin libpmix2 libpmix-dev iproute2 util-linux hostname
      openssh-server openssh-client)
[[ $ACCT == dbd ]] && PKGS+=(slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client)
MISSING=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed' || MISSING+=("$p")
done
if (( ${#MISSING[@]} )); then
    log "installing: ${MISSING[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2 9>&-
    # --no-install-recommends: otherwise 42 packages (HDF5, RRD, ROCm SMI, ...) come along for nothing.
    # "invoke-rc.d: policy-rc.d denied execution of start." is expected: we start the daemons ourselves.
    apt-get install -y --no-install-recommends "${MISSING[@]}" >&2 9>&-
fi

# ----------------------------------------------------------------------------------------------------
# 2. Fresh state. Job ids restart at 1 with a fresh StateSaveLocation, so everything that remembers ids
#    (state, spool, logs, the accounting DB below) is reset together.
# ----------------------------------------------------------------------------------------------------
mkdir -p "$STATEDIR"
rm -rf "$STATEDIR"/ctld "$STATEDIR"/d "$STATEDIR"/run "$STATEDIR"/log "$STATEDIR"/started.* \
       "$STATEDIR"/env.sh "$STATEDIR"/cluster.id "$STATEDIR"/nodes
mkdir -p "$STATEDIR"/{ctld,run,log}
for ((i = 1; i <= NODES; i++)); do mkdir -p "$STATEDIR/d/c$i/tmp"; done   # gotcha 4: not created by slurmd
echo "$NODES" > "$STATEDIR/nodes"   # read by slurm-down.sh to know which namespaces are ours

# ----------------------------------------------------------------------------------------------------
# 3. munge. Shared by every Slurm daemon and client on the machine; reuse one that already works and only
#    stop it later if we started it.
# ----------------------------------------------------------------------------------------------------
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 600 /etc/munge/munge.key
    fi
    # No systemd: its RuntimeDirectory= would normally create /run/munge.
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    # A stale pid file from a killed munged makes the new one refuse to start.
    if [[ -e /run/munge/munged.pid ]] && ! pidfile_alive /run/munge/munged.pid; then rm -f /run/munge/munged.pid; fi
    runuser -u munge -- /usr/sbin/munged 9>&-
    touch "$STATEDIR/started.munge"
    wait_for 10 munge_ok || fail_with_logs "munged did not come up"
fi

# ----------------------------------------------------------------------------------------------------
# 4. MariaDB + slurmdbd (-a dbd). Without them sacct fails ("Slurm accounting storage is disabled"),
#    accounts/QOS cannot be validated, and submitit cannot see cancelled jobs.
# ----------------------------------------------------------------------------------------------------
mysql_ok() { mysqladmin --protocol=socket --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1; }
if [[ $ACCT == dbd ]]; then
    if ! mysql_ok; then
        mkdir -p /run/mysqld
        chown mysql:mysql /run/mysqld
        if [[ ! -d /var/lib/mysql/mysql ]]; then
            log "initializing /var/lib/mysql"
            mariadb-install-db --user=mysql --datadir=/var/lib/mysql >&2 9>&-
        fi
        # Loopback only, no DNS lookups; mariadbd daemonizes itself by being backgrounded here (it does
        # not fork). setsid so it does not die with the caller's terminal/process group.
        setsid /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --bind-address=127.0.0.1 \
            --skip-name-resolve --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/mysqld.pid \
            --log-error="$STATEDIR/log/mariadb.err" </dev/null >/dev/null 2>&1 9>&- &
        touch "$STATEDIR/started.mariadb"
        wait_for 30 mysql_ok || fail_with_logs "MariaDB did not come up"
    fi
    # Drop the accounting DB: job ids restart at 1 with the fresh state, and old rows with the same ids
    # would make sacct show the wrong job (gotcha 9).
    mariadb --protocol=socket --socket=/run/mysqld/mysqld.sock -uroot <<'SQL'
DROP DATABASE IF EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL

    # slurmdbd has no -f: it reads slurmdbd.conf next to $SLURM_CONF, which must be 0600 and owned by
    # SlurmUser (gotcha 8).
    cat > "$STATEDIR/slurmdbd.conf" <<EOF
# Written by tests/cluster/slurm-up.sh; regenerated at each fresh start.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$STATEDIR/run/slurmdbd.pid
LogFile=$STATEDIR/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$STATEDIR/slurmdbd.conf"
fi

# ----------------------------------------------------------------------------------------------------
# 5. Network: one namespace per node on a private bridge, so each node has its own address and hostname
#    (`srun hostname` prints c1, c2, ...), as on a real cluster. Nothing is routed beyond 10.200.0.0/24.
# ----------------------------------------------------------------------------------------------------
ip link add "$BRIDGE" type bridge
ip addr add 10.200.0.1/24 dev "$BRIDGE"
ip link set "$BRIDGE" up
for ((i = 1; i <= NODES; i++)); do
    ns=sn$i
    ip netns add "$ns"
    ip link add "vh$i" type veth peer name eth0 netns "$ns"
    ip link set "vh$i" master "$BRIDGE" up
    ip -n "$ns" addr add "10.200.0.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done
# The kernel's ARP table is one for all namespaces, and only the host's gc_thresh* bound it (1024
# entries by default): an all-to-all job (gloo's full mesh, MPI) on N nodes needs about N x N entries, and
# at 64 nodes the table overflowed ("neighbour: arp_cache: neighbor table overflow!" in dmesg) and
# torch's gloo failed with "No route to host". Raise the bounds to fit; slurm-down.sh puts the old back.
NEIGH=/proc/sys/net/ipv4/neigh/default
need=$(( (NODES + 1) * (NODES + 1) * 2 ))
if (( $(cat "$NEIGH/gc_thresh3") < need )); then
    [[ -e $STATEDIR/neigh.saved ]] ||
        printf '%s %s %s\n' "$(cat "$NEIGH/gc_thresh1")" "$(cat "$NEIGH/gc_thresh2")" "$(cat "$NEIGH/gc_thresh3")" \
            > "$STATEDIR/neigh.saved"
    echo $(( need / 2 )) > "$NEIGH/gc_thresh1"
    echo "$need" > "$NEIGH/gc_thresh2"
    echo "$need" > "$NEIGH/gc_thresh3"
fi
# Node names must resolve on the host (srun, slurmctld) and in the nodes (the mount namespace and thus
# /etc/hosts is shared). Rewrite in place: /etc/hosts may be a bind mount, so no mv over it.
HOSTS_NEW=$(grep -v -- "$HOSTS_TAG" /etc/hosts || true)
{
    printf '%s\n' "$HOSTS_NEW"
    for ((i = 1; i <= NODES; i++)); do printf '10.200.0.%d c%d %s\n' $((10 + i)) "$i" "$HOSTS_TAG"; done
} > /etc/hosts

# ----------------------------------------------------------------------------------------------------
# 6. slurm.conf
# ----------------------------------------------------------------------------------------------------
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
# Memory is not a consumable (CR_Core), so each node advertises 90% of the host's memory: RealMemory only
# bounds what a single job may ask for with --mem.
NODE_MEM=$((MEM_MB * 9 / 10))
if [[ $ACCT == dbd ]]; then
    ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
# associations: unknown --account is refused; qos: unknown/disallowed --qos is refused; limits: QOS limits apply.
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
else
    ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
cat > "$CONF" <<EOF
# Written by tests/cluster/slurm-up.sh ($WANT_ID); regenerated at each fresh start.
ClusterName=hpclaunch
# Must be this host's short name (gotcha 3); the address is the bridge so the namespaced nodes reach it.
SlurmctldHost=$CTLD_HOST(10.200.0.1)
# Everything runs as root: no chown of state/spool/log dirs, no munge uid mapping.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$STATEDIR/ctld
SlurmdSpoolDir=$STATEDIR/d/%n
SlurmctldPidFile=$STATEDIR/run/slurmctld.pid
SlurmdPidFile=$STATEDIR/run/slurmd-%n.pid
SlurmctldLogFile=$STATEDIR/log/slurmctld.log
SlurmdLogFile=$STATEDIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroup dependency: works whatever the host mounts (the nodes share the host's cgroup tree).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Trust CPUs=/RealMemory= below instead of the hardware: lets 2 real cores pose as NODES x CPUS.
SlurmdParameters=config_overrides
# No MPI plugin unless asked; srun --mpi=pmix is what Debian's Open MPI 4.1 understands (README).
MpiDefault=none
# The nodes share one /tmp (same mount namespace), and mpi/pmix creates /tmp/spmix_appdir_<uid>_<step> on
# every node: the second node then fails with "Cannot create directory ...: File exists" and the step
# aborts. Slurm expands %n in TmpFS (it supports several slurmd per host), which gives each node its own.
TmpFS=$STATEDIR/d/%n/tmp
MailProg=/bin/true
# Test-speed settings: short jobs are scheduled at once, a requeued job restarts after ~11 s instead of
# 121 s, finished jobs stay visible in squeue/scontrol for 5 min, a returning node is usable at once.
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2,sched_min_interval=0
AuthInfo=cred_expire=10
MinJobAge=300
KillWait=5
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
# Deliberately small (Slurm's default is 1001 too, sites often raise it): the largest array index is
# MaxArraySize-1 = 1000, so tests can check that hpclaunch splits a 2500-task array into chunks.
MaxArraySize=1001
MaxJobCount=20000
# Reject jobs over a partition limit (e.g. --time above MaxTime) at submission instead of letting them pend.
EnforcePartLimits=ALL
$ACCT_CONF
JobCompType=jobcomp/filetxt
JobCompLoc=$STATEDIR/log/jobcomp.txt
EOF
for ((i = 1; i <= NODES; i++)); do
    echo "NodeName=c$i NodeHostname=c$i NodeAddr=10.200.0.$((10 + i)) CPUs=$CPUS RealMemory=$NODE_MEM State=UNKNOWN" >> "$CONF"
done
# Finite MaxTime on purpose: tests check that a --time above the partition's limit is refused. Refused at
# submission needs EnforcePartLimits (set above); without it such a job is accepted and pends forever with
# Reason=PartitionTimeLimit.
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=60 State=UP" >> "$CONF"
chmod 644 "$CONF"
echo "$WANT_ID" > "$STATEDIR/cluster.id"

# ----------------------------------------------------------------------------------------------------
# 7. Daemons, in dependency order. They all fork and exit 0 even when they die right after on a config
#    error, so readiness is always checked, never inferred from exit codes.
# ----------------------------------------------------------------------------------------------------
if [[ $ACCT == dbd ]]; then
    slurmdbd >&2 9>&- || fail_with_logs "slurmdbd failed to start"
    wait_for 30 port_busy 6819 || fail_with_logs "slurmdbd did not listen on 6819"
fi
slurmctld >&2 9>&- || fail_with_logs "slurmctld failed to start"
wait_for 30 ctld_up || fail_with_logs "slurmctld did not answer scontrol ping"

for ((i = 1; i <= NODES; i++)); do
    # Not `ip netns exec`: it remounts /sys, /sys/fs/cgroup vanishes and slurmd refuses to start
    # (gotcha 6). nsenter keeps the host's mount namespace; unshare --uts gives the node its own hostname.
    nsenter --net="/run/netns/sn$i" unshare --uts bash -c "hostname c$i; exec slurmd -N c$i" >&2 9>&- \
        || fail_with_logs "slurmd c$i failed to start"
done
wait_for "$READY_TIMEOUT" all_idle || { sinfo -N >&2 || true; fail_with_logs "not all $NODES nodes became idle within ${READY_TIMEOUT} s"; }

# ----------------------------------------------------------------------------------------------------
# 7b. sshd on every node, like a real cluster's compute nodes: horovodrun (and mpirun outside Slurm)
#     start remote ranks with ssh. Root logs in with the cluster's own key only; nothing in ~/.ssh or
#     /etc/ssh is touched. The keys live in STATEDIR/ssh and survive restarts, so a known_hosts entry that
#     ssh added on an earlier run still matches (a changed host key would print a warning on every call).
#     StrictModes no: STATEDIR is under /tmp (mode 1777), which sshd's path check would refuse.
# ----------------------------------------------------------------------------------------------------
SSHDIR=$STATEDIR/ssh
mkdir -p "$SSHDIR" /run/sshd   # /run/sshd: sshd's privilege separation dir (systemd would create it)
chmod 700 "$SSHDIR"
[[ -s $SSHDIR/host_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C "hpclaunch test cluster host" -f "$SSHDIR/host_ed25519"
[[ -s $SSHDIR/id_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C "hpclaunch test cluster root" -f "$SSHDIR/id_ed25519"
cp "$SSHDIR/id_ed25519.pub" "$SSHDIR/authorized_keys"
cat > "$SSHDIR/sshd_config" <<EOF
# Written by tests/cluster/slurm-up.sh; ListenAddress and PidFile are given per node on the command line.
Port 22
HostKey $SSHDIR/host_ed25519
AuthorizedKeysFile $SSHDIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
LogLevel ERROR
EOF
for ((i = 1; i <= NODES; i++)); do
    nsenter --net="/run/netns/sn$i" unshare --uts bash -c \
        "hostname c$i; exec /usr/sbin/sshd -f '$SSHDIR/sshd_config' -o ListenAddress=10.200.0.$((10 + i)) -o PidFile='$STATEDIR/run/sshd-c$i.pid' -E '$STATEDIR/log/sshd-c$i.log'" \
        >&2 9>&- || fail_with_logs "sshd c$i failed to start"
done
wait_for 10 all_sshd_up || fail_with_logs "not every node's sshd listens on port 22 (logs: $STATEDIR/log/sshd-c*.log)"
MPI_PROBLEM=$(mpi_plugin_problem)
[[ -z $MPI_PROBLEM ]] || fail_with_logs "MPI plugin $MPI_PLUGIN cannot load: $MPI_PROBLEM"

# ----------------------------------------------------------------------------------------------------
# 8. Accounts and QOS for the tests of --account/--qos validation. The cluster and root's association to
#    account root are created by slurmctld's registration; add an hpclaunch account and give root an
#    association to it with QOS normal (slurmdbd creates QOS normal on a fresh DB).
# ----------------------------------------------------------------------------------------------------
if [[ $ACCT == dbd ]]; then
    sacctmgr -i add account hpclaunch Description="hpclaunch tests" Organization=hpclaunch >&2 \
        || fail_with_logs "sacctmgr add account failed"
    sacctmgr -i add user root Account=hpclaunch QOS=normal DefaultQOS=normal >&2 \
        || fail_with_logs "sacctmgr add user failed"
    assoc_ready() { sacctmgr -n -P show assoc where user=root account=hpclaunch format=Account | grep -qx hpclaunch; }
    wait_for 10 assoc_ready || fail_with_logs "association root/hpclaunch not visible"
fi

echo "$EXPORT_LINE" > "$STATEDIR/env.sh"
log "up: $NODES nodes x $CPUS CPUs, accounting=$ACCT, statedir=$STATEDIR in $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
echo "$EXPORT_LINE"
