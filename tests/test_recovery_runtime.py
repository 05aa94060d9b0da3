"""In-allocation recovery's job-side parts without a cluster (docs/recovery.md): the node watch and the
supervisor's judgements with real processes (ranks that step, stop and end; watches that die as a
node would), the process-tree kill, the checkpoint cadence, and job.sh's placement and restart
bookkeeping sourced in bash. The same under Slurm with a node killed: tests/test_recovery_cluster.py."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hpclaunch import runtime
from hpclaunch.runtime import cadence, progress, supervise

PY = sys.executable
HOST = os.uname().nodename

# A rank that steps: a step record every STEP seconds (time_unix, steps, step_time_s), its log a line a
# step; STEP and SLOW_AFTER (steps, then twice as slow) from the environment.
RANK = r'''
import json, os, sys, time
rank, run_dir = sys.argv[1], sys.argv[2]
step = float(os.environ.get("STEP", "0.2")); slow_after = int(os.environ.get("SLOW_AFTER", "0"))
os.makedirs(os.path.join(run_dir, "metrics"), exist_ok=True)
path = os.path.join(run_dir, "metrics", f"rank{rank}.jsonl")
with open(path, "a") as f:
    f.write(json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": int(rank)}) + "\n")
    n = 0
    while True:
        n += 1
        dt = step * (2 if slow_after and n > slow_after else 1)
        end = time.perf_counter() + dt
        while time.perf_counter() < end:   # busy, as a rank computing is
            pass
        f.write(json.dumps({"kind": "step", "time_unix": time.time(), "rank": int(rank), "step": n, "steps": 1,
                            "step_time_s": dt}) + "\n")
        f.flush()
        print("step", n, flush=True)
'''


def start_rank(run_dir, rank, attempt=0, **env):
    log_dir = run_dir / "logs" / f"attempt{attempt}"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"rank{rank}.log", "a")
    p = subprocess.Popen([PY, "-c", RANK, str(rank), str(run_dir)], stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, **{k: str(v) for k, v in env.items()}})
    with open(log_dir / "ranks.tsv", "a") as f:
        f.write(f"{rank}\t{HOST}\t{p.pid}\n")
    return p


def start_watch(run_dir, node, idle_cpu=0.05):
    return subprocess.Popen([PY, "-m", "hpclaunch.runtime.watch", "--run-dir", str(run_dir), "--node", node,
                             "--interval", "0.3", "--idle-cpu", str(idle_cpu)])


def launched(run_dir, attempt=0):
    (run_dir / ".hpclaunch").mkdir(parents=True, exist_ok=True)
    (run_dir / ".hpclaunch" / "attempt").write_text(f"{attempt} {int(time.time())}\n")


def beat(run_dir, node):
    try:
        return json.loads((run_dir / ".hpclaunch" / "watch" / f"{node}.json").read_text())
    except (OSError, ValueError):
        return None


def wait_for(what, timeout=30.0, every=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def judge(run_dir, nodes, step_pid, *, hang="3:2:30:0.05", spares="", timeout=6, attempt=0, wait=60):
    out = run_dir / "verdict"
    p = subprocess.run([PY, "-m", "hpclaunch.runtime.supervise", "judge", "--run-dir", str(run_dir), "--nodes", nodes,
                        "--spares", spares, "--step-pid", str(step_pid), "--attempt", str(attempt), "--hang", hang,
                        "--heartbeat-timeout", str(timeout), "--out", str(out)], capture_output=True, text=True,
                       timeout=wait)
    assert p.returncode == 0, p.stderr
    return dict(w.split("=", 1) for w in out.read_text().split())


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except OSError:
                pass
            p.wait()


# --- progress: what counts, and the bound ---------------------------------------------------------

def test_the_bound_is_factor_times_the_p99_within_floor_and_ceiling():
    assert progress.p99([]) is None and progress.p99([5.0]) == 5.0
    assert progress.p99(list(range(1, 101))) == 99 and progress.p99([1.0] * 99 + [50.0]) == 1.0
    assert progress.bound(2.0, True, 3, 10, 100) == 10       # 6 s: the floor
    assert progress.bound(20.0, True, 3, 10, 100) == 60
    assert progress.bound(50.0, True, 3, 10, 100) == 100     # the ceiling
    assert progress.bound(2.0, False, 3, 10, 100) == 100     # no step this attempt yet: the ceiling
    assert progress.bound(None, True, 3, 10, 100) == 100


def test_step_intervals_read_complete_step_records_only():
    lines = [b'{"kind":"header","schema":"hpclaunch.metrics/1"}\n',
             b'{"kind":"step","time_unix":10.0,"steps":10,"step_time_s":0.5}\n',
             b'{"kind":"epoch","time_unix":11.0,"step":10}\n',
             b'{"kind":"step","time_unix":20.0}\n',                        # no step time: since the last record
             b'{"kind":"step","time_unix":21.0,"steps":1,"step_time_s":NaN}\n',
             b'{"kind":"step","time_unix":30.0,"steps":2,"step_time_s":1.5}']   # cut: no newline
    assert progress.step_intervals(lines) == [(10.0, 5.0), (20.0, 10.0), (21.0, 1.0)]


def test_the_hung_rank_named_is_the_stopped_one_else_the_quietest():
    assert progress.hung_rank({"0": {"state": "S", "quiet_s": 50}, "1": {"state": "T", "quiet_s": 40}}) == "1"
    assert progress.hung_rank({"0": {"state": "S", "quiet_s": 50}, "1": {"state": "S", "quiet_s": 40}}) == "0"
    assert progress.hung_rank({"3": {"state": "S", "quiet_s": 9}, "2": {"state": "S", "quiet_s": 9}}) == "2"


# --- the cadence ---------------------------------------------------------------------------------

def test_young_daly_interval():
    assert cadence.young(50, 3600) == pytest.approx(600.0)
    # Daly's higher-order form, below Young's by about the cost for C << M
    assert cadence.daly(50, 3600) == pytest.approx(600 * (1 + (50 / 7200) ** 0.5 / 3 + 50 / 7200 / 9) - 50)
    assert cadence.daly(10000, 3600) == 3600                 # C >= 2M: the MTBF
    assert cadence.interval_s(0.001, 1.0) == cadence.MIN_INTERVAL_S
    # the fleet's rate, blended with what the job saw
    assert cadence.mtbf_s(1 / 1000, 4) == pytest.approx(250 * 3600.0)   # 4 nodes x 1/1000 an hour
    assert cadence.mtbf_s(None, 1) == pytest.approx(3600 / cadence.DEFAULT_RATE)
    seen = cadence.mtbf_s(1 / 1000, 1, failures=10, node_hours=100)
    assert seen == pytest.approx(3600 / ((1 / 1000 * cadence.PRIOR_NODE_HOURS + 10) / (cadence.PRIOR_NODE_HOURS + 100)))


def test_the_cadence_takes_the_measured_cost_and_the_failures_seen(tmp_path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / ".hpclaunch").mkdir()
    events = [{"kind": "checkpoint", "time_unix": t, "seconds": c} for t, c in
              [(1, 100.0), (2, 4.0), (3, 6.0), (4, 5.0), (5, 7.0), (6, 3.0)]]
    (tmp_path / "metrics" / "rank0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "{cut")
    assert cadence.measured_cost(str(tmp_path)) == 5.0       # the newest five: 4, 6, 5, 7, 3
    (tmp_path / ".hpclaunch" / "state").write_text(
        "1000 attempt=0 start host=a nodes=2\n1000 attempt=0 launch nodes=a,b\n4600 attempt=0 fence node=b reason=node\n"
        "4600 attempt=0 end rc=137 outcome=restart reason=node\n4601 attempt=1 start host=a nodes=2\n"
        "8200 attempt=1 end rc=0 outcome=completed\n")
    failures, hours = cadence.seen(str(tmp_path), 2)
    assert failures == 1 and hours == pytest.approx((3600 + 3599) * 2 / 3600)
    got, mtbf = cadence.for_job(str(tmp_path), "auto", 30.0, 1 / 1000, 2)
    assert mtbf == pytest.approx(cadence.mtbf_s(1 / 1000, 2, failures, hours))
    assert got == pytest.approx(cadence.interval_s(5.0, mtbf))
    assert cadence.for_job(str(tmp_path), "off", 30.0, None, 2) == (None, None)
    assert cadence.for_job(str(tmp_path), "600", 30.0, None, 2) == (600.0, None)
    out = subprocess.run([PY, "-m", "hpclaunch.runtime.supervise", "interval", "--run-dir", str(tmp_path),
                          "--cost", "30", "--rate", "0.001", "--nodes", "2"], capture_output=True, text=True, check=True)
    assert out.stdout == f"{got:.0f} {mtbf:.0f}\n"


# --- the watch and the judge, with real processes -------------------------------------------------

def test_the_watch_beats_and_follows_its_ranks(tmp_path, procs):
    launched(tmp_path)
    r0 = start_rank(tmp_path, 0)
    procs.append(r0)
    w = start_watch(tmp_path, "n1")
    procs.append(w)
    doc = wait_for(lambda: (b := beat(tmp_path, "n1")) and b["ranks"].get("0", {}).get("stepped") and b)
    info = doc["ranks"]["0"]
    assert doc["node"] == "n1" and doc["host"] == HOST and doc["attempt"] == 0
    assert info["alive"] and info["pid"] == r0.pid and info["p99_s"] == pytest.approx(0.2)
    seq = doc["seq"]
    os.kill(r0.pid, signal.SIGSTOP)
    doc = wait_for(lambda: (b := beat(tmp_path, "n1")) and b["ranks"]["0"]["quiet_s"] > 1.5 and b)
    assert doc["ranks"]["0"]["state"] == "T" and doc["seq"] > seq
    os.kill(r0.pid, signal.SIGKILL)
    r0.wait()
    assert wait_for(lambda: (b := beat(tmp_path, "n1")) and not b["ranks"]["0"]["alive"])


def test_a_node_that_stops_beating_is_dead_a_spare_too(tmp_path, procs):
    launched(tmp_path)
    step = subprocess.Popen(["sleep", "120"])
    procs.append(step)
    watches = {n: start_watch(tmp_path, n) for n in ("n1", "n2", "n3")}
    procs.extend(watches.values())
    wait_for(lambda: all(beat(tmp_path, n) for n in watches))
    watches["n2"].kill()            # the node's processes all die: its watch with them
    t0 = time.time()
    v = judge(tmp_path, "n1,n2", step.pid, spares="n3", hang="off", timeout=3)
    # since: when the judge last heard it (at the latest its own start, which a busy machine delays)
    assert v["verdict"] == "node" and v["node"] == "n2" and t0 - 1.5 <= float(v["since"]) <= time.time() - 3 + 0.5
    assert time.time() - t0 < 3 + 3
    watches["n3"].kill()
    v = judge(tmp_path, "n1", step.pid, spares="n3", hang="off", timeout=3)
    assert v == {"verdict": "spare", "node": "n3", "since": v["since"]}


def test_the_judge_says_ended_when_the_step_ends(tmp_path, procs):
    launched(tmp_path)
    w = start_watch(tmp_path, "n1")
    procs.append(w)
    step = subprocess.Popen(["sleep", "1"])
    assert judge(tmp_path, "n1", step.pid) == {"verdict": "ended"}
    step.wait()


def test_a_stopped_rank_is_hung_past_its_bound_and_its_stacks_are_saved(tmp_path, procs):
    launched(tmp_path)
    ranks = [start_rank(tmp_path, r) for r in (0, 1)]
    procs.extend(ranks)
    w = start_watch(tmp_path, "n1")
    procs.append(w)
    wait_for(lambda: (b := beat(tmp_path, "n1")) and all(b["ranks"].get(str(r), {}).get("stepped") for r in (0, 1)))
    os.kill(ranks[1].pid, signal.SIGSTOP)
    stopped = time.time()
    v = judge(tmp_path, "n1", ranks[0].pid, hang="3:2:30:0.05")
    took = time.time() - stopped
    # rank 0 steps on (busy): only the stopped one is quiet; the bound is the floor (3 x 0.2 s < 2 s)
    assert v["verdict"] == "hang" and v["rank"] == "1" and v["node"] == "n1" and v["state"] == "T"
    assert float(v["bound_s"]) == 2.0 and 2.0 <= took < 2.0 + 3.0, took
    dump = open(os.path.join(v["stacks"], "rank1.txt")).read()
    assert f"rank 1 on {HOST}, pid {ranks[1].pid}" in dump and "State: T (stopped)" in dump
    assert "step" in dump.split("its log")[1]            # the last lines of its log
    if supervise_has_py_spy():
        assert "Thread" in dump and "<module>" in dump   # its Python stack, read while it is stopped


def supervise_has_py_spy():
    from hpclaunch.runtime import stacks
    return stacks.py_spy() is not None


def test_a_straggler_at_twice_its_step_time_is_not_hung(tmp_path, procs):
    launched(tmp_path)
    # 0.5 s steps, then 1 s steps (twice as slow) from the 4th: the bound is 3 x p99, at least the floor
    r = start_rank(tmp_path, 0, STEP=0.5, SLOW_AFTER=3)
    procs.append(r)
    w = start_watch(tmp_path, "n1", idle_cpu=1.0)   # CPU never counts: only the step records and the log do
    procs.append(w)
    step = subprocess.Popen(["sleep", "12"])
    procs.append(step)
    v = judge(tmp_path, "n1", step.pid, hang="3:1.2:30:1.0")
    assert v == {"verdict": "ended"}                  # 12 s of 1 s steps: never quiet past 1.5 s
    os.kill(r.pid, signal.SIGSTOP)                    # the same rank stopped is
    step = subprocess.Popen(["sleep", "60"])
    procs.append(step)
    assert judge(tmp_path, "n1", step.pid, hang="3:1.2:30:1.0")["verdict"] == "hang"


def test_liveness_after_a_failed_step(tmp_path, procs):
    launched(tmp_path)
    watches = {n: start_watch(tmp_path, n) for n in ("n1", "n2")}
    procs.extend(watches.values())
    wait_for(lambda: all(beat(tmp_path, n) for n in watches))

    def liveness():
        out = tmp_path / "live"
        subprocess.run([PY, "-m", "hpclaunch.runtime.supervise", "liveness", "--run-dir", str(tmp_path), "--nodes",
                        "n1,n2", "--heartbeat-timeout", "3", "--out", str(out)], check=True, timeout=30)
        return out.read_text().split()

    assert liveness() == ["verdict=alive"]
    watches["n1"].kill()
    assert liveness()[:2] == ["verdict=node", "node=n1"]


def test_kill_tree_ends_a_process_and_everything_under_it(tmp_path):
    tree = subprocess.Popen(["bash", "-c", "sleep 300 & (sleep 300 & sleep 300 & wait) & trap '' TERM; wait"])
    time.sleep(0.5)
    under = supervise.descendants(tree.pid)
    assert len(under) >= 4
    subprocess.run([PY, "-m", "hpclaunch.runtime.supervise", "kill-tree", str(tree.pid)], check=True, timeout=30)
    assert tree.wait(timeout=10) == -signal.SIGKILL
    time.sleep(0.2)
    assert not [p for p in under if os.path.exists(f"/proc/{p}") and supervise.step_ended(p) is False]


# --- job.sh: placement, fencing and attempt numbers ------------------------------------------------

def sh(tmp_path, code, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HPCLAUNCH_", "SLURM_"))}
    base.update(HPCLAUNCH_PYTHON=PY, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="3",
                SLURM_SUBMIT_DIR=str(tmp_path), HPCLAUNCH_MAX_ATTEMPTS="3", HPCLAUNCH_REQUEUE_EXIT="75",
                HPCLAUNCH_REQUEUE_SIGNAL="USR2")
    base.update(env)
    script = f'set -uo pipefail\n. {runtime.path()!r} {runtime.VERSION}\n{code}\n'
    return subprocess.run(["bash", "-c", script, str(tmp_path / "job.sbatch")], cwd=str(tmp_path), env=base,
                          capture_output=True, text=True, timeout=60)


def test_the_step_runs_on_the_jobs_node_count_without_the_fenced_the_batch_node_first(tmp_path):
    me = HOST
    p = sh(tmp_path, f'''hl_recovery nodes=2 spares=1
hl_port=1234
hl_alloc=(c1 c2 {me})
hl_place; echo "rc=$? nodes=${{hl_nodes[*]}} spares=${{hl_spares[*]}} head=$hl_head batch=$hl_batch_node place=${{hl_step_place[*]}}"
hl_fenced=(c1)
hl_place; echo "rc=$? nodes=${{hl_nodes[*]}} spares=${{hl_spares[*]:-}} place=${{hl_step_place[*]}}"
hl_fenced=(c1 c2)
hl_place; echo "rc=$? nodes=${{hl_nodes[*]}}"
hl_restarts=1; hl_rec_nodes=1
hl_place; echo "rc=$? place=${{hl_step_place[*]}}"''')
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"rc=0 nodes={me} c1 spares=c2 head={me} batch={me} place=--nodes=2 --nodelist={me},c1",
        f"rc=0 nodes={me} c2 spares= place=--nodes=2 --nodelist={me},c2",
        f"rc=1 nodes={me}",
        f"rc=0 place=--nodes=1 --nodelist={me} --overlap"]


def test_without_spares_the_step_keeps_the_allocations_placement(tmp_path):
    p = sh(tmp_path, 'hl_port=1; hl_alloc=(c1 c2); hl_place; echo "${hl_step_place[*]}"', SLURM_JOB_NUM_NODES="2")
    assert p.stdout == "--nodes=2\n"       # as before recovery: srun --nodes="$SLURM_JOB_NUM_NODES"


@pytest.mark.parametrize("setting", ["nodes=x", "hang=3:1", "rate=1;rm -rf x", "checkpoint=soon", "checkpoint=auto:1",
                                     "spare=1", "on=maybe"])
def test_a_recovery_setting_the_runtime_does_not_know_stops_the_job(tmp_path, setting):
    p = sh(tmp_path, f"hl_recovery '{setting}'; echo went on")
    assert p.returncode == 2 and "went on" not in p.stdout
    assert p.stderr.strip() == f"hpclaunch: hl_recovery: unknown setting '{setting}' (the script and its runtime disagree)"


def test_attempt_numbers_go_on_after_restarts_inside_an_earlier_allocation(tmp_path):
    code = 'hl_run_dir runs j; echo "$HPCLAUNCH_ATTEMPT"'
    assert sh(tmp_path, code).stdout == "0\n"
    run_dir = tmp_path / "runs" / "j-7"
    (run_dir / ".hpclaunch" / "attempt").write_text("2 1700000000\n")   # restarts made attempts 1 and 2
    assert sh(tmp_path, code, SLURM_RESTART_COUNT="1").stdout == "3\n"
    assert sh(tmp_path, code, SLURM_RESTART_COUNT="4").stdout == "4\n"


def test_the_first_start_takes_the_rendered_interval_later_ones_ask_the_cadence(tmp_path):
    """auto:FIRST:MTBF: attempt 0 exports the plan's interval without starting Python; a restart's
    comes from runtime/cadence.py (the cost measured by then)."""
    (tmp_path / "run" / ".hpclaunch").mkdir(parents=True)
    (tmp_path / "run" / "metrics").mkdir()
    (tmp_path / "run" / "metrics" / "rank0.jsonl").write_text('{"kind": "checkpoint", "time_unix": 1, "seconds": 2}\n')
    code = f'''hl_recovery checkpoint=auto:777:99999 cost=30 rate=0.001
export HPCLAUNCH_RUN_DIR={tmp_path / "run"} HPCLAUNCH_ATTEMPT=$A
hl_nodes=(n1 n2) hl_spares=()
noop() {{ sleep 0 & }}
hl_launch_step noop
echo "$HPCLAUNCH_CHECKPOINT_INTERVAL_S $HPCLAUNCH_MTBF_S"'''
    assert sh(tmp_path, code, A="0").stdout == "777 99999\n"
    mtbf = cadence.mtbf_s(0.001, 2)
    assert sh(tmp_path, code, A="1").stdout == f"{cadence.interval_s(2.0, mtbf):.0f} {mtbf:.0f}\n"


def test_the_monitors_and_the_watch_start_after_the_ranks_step(tmp_path):
    """On Slurm the ranks' step is launched first, then the monitors' (with the options the script gave
    hl_monitor_start) and the node watch's: started before it, their steps held the ranks' back (at 32
    nodes 2.7 s against 0.3 s, docs/bench/scale-cluster-start.md). A relaunch starts neither again."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nn=ranks\nfor a; do case $a in --job-name=*) n=${a#--job-name=} ;; esac; done\n'
                               'echo "$n $(printf "%s\\n" "$@" | grep -c -x -- --gres=gpu:1)" >>"$SRUN_LOG"\n')
    (fake / "srun").chmod(0o755)
    log = tmp_path / "srun.log"
    p = sh(tmp_path, '''hl_run_dir runs j
hl_recovery on=yes nodes=1 spares=0 hang=3.0:120.0:1800.0:0.05 checkpoint=off
hl_port=1; hl_alloc=(c1); hl_place
hl_monitor=(true)
hl_monitor_start --gres=gpu:1
sleep 0.5; [ -e "$SRUN_LOG" ] && echo "started early" || echo "deferred"
launch() { echo launch >>"$SRUN_LOG"; sleep 0 & }
hl_launch_step launch; first=$hl_step_pid; wait
hl_launch_step launch; wait
echo "monitor=${hl_monitor_pid:+yes} watch=${hl_watch_pid:+yes} step=$([ "$first" != "$hl_monitor_pid" ] && echo own)"''',
           PATH=f"{fake}:{os.environ['PATH']}", SRUN_LOG=str(log))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["deferred", "monitor=yes watch=yes step=own"], p.stdout
    lines = log.read_text().splitlines()   # the side steps' sruns run in the background: either first
    assert lines[0] == "launch" and sorted(lines[1:3]) == ["hpclaunch-monitor 1", "hpclaunch-watch 0"], lines
    assert lines[3:] == ["launch"], lines
