"""Issue 13, the job contract for any program (not only train_entry), without Slurm: success is never
requeued, the requeue signal reaches ranks that ask for it, exit codes tell the truth, a failure
explains itself, Ctrl-C leaves the job running, list refreshes in one call, cancel of an ended job.
The same on Slurm: tests/test_job_contract_cluster.py."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file

from hpclaunch import runtime
from hpclaunch.launchers.backends.base import EXIT_CODES, JobStatus, State, exit_code_for
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = socket.gethostname()


def submit_wait(tmp_path, job, timeout=180):
    return hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False, timeout=timeout)


def status(ref):
    return json.loads(hl("status", ref, "--json", cwd="/").stdout)


def until(fn, timeout=30.0, poll=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    return fn()


# --- the exit code map: code, README and docs agree ---------------------------------------------

def test_exit_codes_tell_the_truth():
    assert exit_code_for(State.COMPLETED) == 0
    assert exit_code_for(State.FAILED, 3, 1) == 3           # the first failing rank's own code
    assert exit_code_for(State.FAILED, None, 7) == 7        # else the scheduler's
    assert exit_code_for(State.FAILED) == 1
    # sacct says 0:0 for these: the state decides, never that code
    assert exit_code_for(State.TIMEOUT, None, 0) == 124
    assert exit_code_for(State.CANCELLED, None, 0) == 125
    named = [State.TIMEOUT, State.CANCELLED, State.NODE_FAIL, State.OUT_OF_MEMORY, State.PREEMPTED, State.GAVE_UP]
    codes = [exit_code_for(s) for s in named]
    assert 0 not in codes and len(set(codes)) == len(codes), codes
    assert exit_code_for(State.GAVE_UP) == 75


def test_readme_table_matches_the_map():
    readme = open(os.path.join(ROOT, "README.md")).read()
    rows = dict(re.findall(r"^\| `([A-Z_]+)`(?: / `[A-Z_]+`)? \| (\d+) ", readme, flags=re.M))
    for state, code in EXIT_CODES.items():
        assert int(rows[state.value]) == code, (state, rows)
    assert "docs/requeue.md" in readme


def test_requeue_keys_in_schema_and_docs(run_cli):
    code, out, _ = run_cli("schema")
    props = json.loads(out)["properties"]["requeue"]["properties"]
    assert {"signal_ranks", "by", "signal", "grace", "max_attempts"} <= set(props)
    assert props["signal"]["default"] == "USR2"
    docs = open(os.path.join(ROOT, "docs", "requeue.md")).read()
    for words in ("signal_ranks: true", "by: program", "Lightning", "submitit", "train_entry", "NCCL", "USR2"):
        assert words in docs, words


# --- rendering each mode ---------------------------------------------------------------------------

JOB = os.path.join(ROOT, "tests", "golden", "job.yaml")


def test_by_program_renders_requeue_and_the_signal_even_with_one_attempt():
    text = render_job(resolve_job(JOB, ["profile=testcluster", "requeue.by=program", "requeue.max_attempts=1",
                                        "requeue.signal=USR1", "requeue.grace=90"]))
    assert "#SBATCH --signal=B:USR1@90\n" in text and "#SBATCH --requeue\n" in text and "--no-requeue" not in text
    # by: program sends it to the ranks by default; what each mode does is tests/test_job_runtime.py's
    assert "\nhl_requeue_mode signal_ranks=yes by=program\n" in text and "HPCLAUNCH_REQUEUE_SIGNAL=USR1\n" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_quick_job_is_not_signalled_unless_a_grace_is_set(run_cli, tmp_path):
    """requeue.grace unset: 120 s before the limit, and no signal at all where the limit is 3 minutes or
    less, as Slurm may send it up to 60 s early (a one-minute test job was refused for a grace it never
    set). Set, it is checked as before; a program that waits for the signal is told it would get none."""
    longer = render_job(resolve_job(JOB, ["profile=testcluster", "resources.time=00:03:01"]))
    assert "#SBATCH --signal=B:USR2@120\n" in longer
    for limit in ("00:01:00", "00:03:00"):
        quick = render_job(resolve_job(JOB, ["profile=testcluster", f"resources.time={limit}"]))
        assert "--signal" not in quick and "#SBATCH --requeue\n" in quick   # Slurm may still requeue on preemption
    subprocess.run(["bash", "-n"], input=quick, text=True, check=True)
    set_ = render_job(resolve_job(JOB, ["profile=testcluster", "resources.time=00:01:00", "requeue.grace=30"]))
    assert "#SBATCH --signal=B:USR2@30\n" in set_
    for extra, words in ((["requeue.grace=60"], "the signal would come before the job starts"),
                         (["requeue.by=program"], "requeue.by is program, but with the default grace of 120 s a "
                                                  "time limit of 60 s gets no signal"),
                         (["requeue.signal_ranks=true"], "requeue.signal_ranks is true")):
        args = ["validate", JOB, "-o", "profile=testcluster", "-o", "resources.time=00:01:00"]
        for o in extra:
            args += ["-o", o]
        code, _, err = run_cli(*args)
        assert code == 2 and "requeue.grace: " + words in err and "Traceback" not in err, err


def test_signal_ranks_only_when_asked():
    def mode(*overrides):
        text = render_job(resolve_job(JOB, ["profile=testcluster", *overrides]))
        return [line for line in text.splitlines() if line.startswith("hl_requeue_mode ")]
    assert mode() == ["hl_requeue_mode signal_ranks=no by=hpclaunch"]
    assert mode("requeue.signal_ranks=true") == ["hl_requeue_mode signal_ranks=yes by=hpclaunch"]
    assert mode("requeue.by=program", "requeue.signal_ranks=false") == ["hl_requeue_mode signal_ranks=no by=program"]


def test_slurm_extra_signal_points_at_the_requeue_keys(tmp_path):
    job = job_file(tmp_path, "name: x\nlauncher: srun\ncommand: [hostname]\nslurm: {extra: ['--signal=USR1@90']}\n")
    proc = hl("validate", job, cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "requeue.signal_ranks" in proc.stderr and "docs/requeue.md" in proc.stderr


def _rank_wrapper() -> str:
    """The body of the rank wrapper (``hl_rank_log=(bash -c "$hl_rank_body" hpclaunch-rank)``), from the
    job runtime every rendered script sources."""
    proc = subprocess.run(["bash", "-c", '. "$1" "$2" && printf %s "$hl_rank_body"', "t", runtime.path(),
                           str(runtime.VERSION)], capture_output=True, text=True, check=True)
    assert "hpclaunch-rank-run" in proc.stdout, proc
    return proc.stdout


def test_a_rank_killed_by_a_signal_its_wrapper_also_got_records_128_plus_n(tmp_path):
    """Slurm signals every process of a step, so the wrapper and its rank get the signal at once. Where
    the rank dies of it while the trap runs, bash 5.2 loses the rank's status (its `wait` said -1, and
    rank<R>.exit said "-1" in about a third of tries): the wrapper must record 143, and exit with it."""
    body = _rank_wrapper()
    codes = []
    for i in range(24):
        logs = tmp_path / f"t{i}"
        logs.mkdir()
        env = dict(os.environ, HPCLAUNCH_LOG_DIR=str(logs), RANK="0")
        p = subprocess.Popen(["bash", "-c", body, "hpclaunch-rank", "sleep", "30"], env=env, start_new_session=True)
        until(lambda: (logs / "ranks.tsv").exists(), timeout=10, poll=0.01)  # the rank is started
        time.sleep(0.02)
        os.killpg(p.pid, signal.SIGTERM)
        wrapper_rc = p.wait(timeout=10)
        code = int((logs / "rank0.exit").read_text().split()[0])
        codes.append((code, wrapper_rc))
    assert set(codes) == {(143, 143)}, codes


EXITS_75_ON_TERM = ("import os, signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda *a: os._exit(75))\n"
                     "open(sys.argv[1], 'w').close()\n"
                     "time.sleep(30)\n")


def test_a_rank_ending_of_its_own_on_a_step_wide_signal_keeps_its_code(tmp_path):
    """The same step-wide signal, and the rank's handler exits 75 at once: the rank's code must be
    recorded and be the wrapper's. A wrapper waiting for it in the background lost that code (bash
    5.2 reaps it inside the `wait` the trap interrupted) and wrote 143 about 1 time in 20 here."""
    body = _rank_wrapper()
    (tmp_path / "rank.py").write_text(EXITS_75_ON_TERM)
    codes = []
    for i in range(60):
        logs = tmp_path / f"t{i}"
        logs.mkdir()
        env = dict(os.environ, HPCLAUNCH_LOG_DIR=str(logs), RANK="0")
        p = subprocess.Popen(["bash", "-c", body, "hpclaunch-rank", sys.executable, str(tmp_path / "rank.py"),
                              str(logs / "ready")], env=env, start_new_session=True)
        until(lambda: (logs / "ready").exists(), timeout=20, poll=0.005)  # its handler is in place
        os.killpg(p.pid, signal.SIGTERM)
        wrapper_rc = p.wait(timeout=10)
        codes.append((int((logs / "rank0.exit").read_text().split()[0]), wrapper_rc))
    assert set(codes) == {(75, 75)}, sorted(codes)
    pids = [int(line.split("\t")[2]) for line in (logs / "ranks.tsv").read_text().splitlines()]
    assert len(pids) == 1 and pids[0] != p.pid     # the rank's own pid, not a shell's


def test_a_signal_sent_to_the_wrapper_alone_reaches_the_rank(tmp_path):
    """torchrun and mpirun signal the worker they started, which is the wrapper: it passes it on."""
    body = _rank_wrapper()
    (tmp_path / "rank.py").write_text(EXITS_75_ON_TERM)
    env = dict(os.environ, HPCLAUNCH_LOG_DIR=str(tmp_path), RANK="3")
    p = subprocess.Popen(["bash", "-c", body, "hpclaunch-rank", sys.executable, str(tmp_path / "rank.py"),
                          str(tmp_path / "ready")], env=env, start_new_session=True)
    until(lambda: (tmp_path / "ready").exists(), timeout=20, poll=0.005)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 75
    assert (tmp_path / "rank3.exit").read_text().split()[0] == "75"


# --- the local backend: the same contract as Slurm ----------------------------------------------------

def test_success_after_the_signal_is_never_requeued(hpc_home, tmp_path):
    """The requeue signal comes while a plain program (no train_entry, no handler) runs; it then exits 0."""
    job = job_file(tmp_path, """
name: late success
launcher: srun
command: [bash, -c, 'sleep 5; echo done']
resources: {nodes: 1, tasks_per_node: 2, time: "00:00:12"}
monitor: {interval: 0}
requeue: {max_attempts: 3, grace: 10}
""")
    proc = submit_wait(tmp_path, job)
    assert proc.returncode == 0, proc.stderr
    st = status("late success")
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0 and st["attempts"] == 1, st
    out = open(os.path.join(st["run_dir"], "logs", "slurm.out")).read()
    assert "SIGUSR2: the time limit is near" in out and "completed, no requeue" in out, out
    assert "requeueing" not in out
    assert os.listdir(os.path.join(st["run_dir"], "logs")).count("attempt1") == 0


HANDLER = r"""
import os, signal, sys, time
rank = int(os.environ["SLURM_PROCID"])
state = os.path.join(os.environ["HPCLAUNCH_RUN_DIR"], "checkpoints", f"rank{rank}")
start = int(open(state).read()) if os.path.exists(state) else 0
print(f"attempt {os.environ['HPCLAUNCH_ATTEMPT']} rank {rank} starts at {start}", flush=True)
step = start
def on_signal(signum, frame):
    with open(state, "w") as f:
        f.write(str(step))
    with open(os.path.join(os.environ["HPCLAUNCH_RUN_DIR"], "handled"), "a") as f:
        f.write(f"{os.environ['HPCLAUNCH_ATTEMPT']} {rank} {signal.Signals(signum).name} {os.uname().nodename}\n")
    print(f"rank {rank} saved step {step}", flush=True)
    sys.exit(int(os.environ["HPCLAUNCH_REQUEUE_EXIT"]))
signal.signal(getattr(signal, "SIG" + os.environ["HPCLAUNCH_REQUEUE_SIGNAL"]), on_signal)
while step < start + (int(sys.argv[1]) if start else 10**9):
    step += 1
    time.sleep(0.1)
print(f"rank {rank} done at {step}", flush=True)
"""


def test_signal_ranks_reaches_every_rank_handler_and_requeues(hpc_home, tmp_path):
    (tmp_path / "handler.py").write_text(HANDLER)
    job = job_file(tmp_path, f"""
name: handled
launcher: srun
command: [{sys.executable}, {tmp_path}/handler.py, "10"]
resources: {{nodes: 1, tasks_per_node: 2, time: "00:00:10"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3, grace: 6, signal_ranks: true}}
""")
    proc = submit_wait(tmp_path, job)
    assert proc.returncode == 0, proc.stderr
    st = status("handled")
    assert st["state"] == "COMPLETED" and st["attempts"] == 2, st
    handled = sorted(open(os.path.join(st["run_dir"], "handled")).read().split("\n")[:-1])
    assert handled == [f"0 0 SIGUSR2 {HOST}", f"0 1 SIGUSR2 {HOST}"]     # each rank once, attempt 0 only
    for rank in (0, 1):
        first = open(os.path.join(st["run_dir"], "logs", "attempt0", f"rank{rank}.log")).read()
        saved = int(first.split(f"rank {rank} saved step ")[1].split()[0])
        second = open(os.path.join(st["run_dir"], "logs", "attempt1", f"rank{rank}.log")).read()
        assert f"starts at {saved}" in second and f"done at {saved + 10}" in second, second
    out = open(os.path.join(st["run_dir"], "logs", "slurm.out")).read()
    assert f"SIGUSR2 sent to 2 rank process(es) on {HOST}" in out, out


def test_exit_code_and_summary_of_a_failing_rank(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: one fails
launcher: srun
command: [bash, -c, 'if [ "$SLURM_PROCID" = 1 ]; then echo "loading shard 7"; echo "ValueError: bad shard" >&2; exit 3; fi; sleep 30']
resources: {nodes: 1, tasks_per_node: 2}
monitor: {interval: 0}
requeue: {max_attempts: 1}
""")
    proc = submit_wait(tmp_path, job)
    assert proc.returncode == 3, proc.stderr
    st = status("one fails")
    err = proc.stderr
    assert f"job {st['job_id']} (one fails) ended FAILED, exit code 3, after 1 attempt(s)" in err, err
    assert f"first failing rank: rank 1 on {HOST}, exit code 3" in err
    assert "| loading shard 7" in err and "| ValueError: bad shard" in err
    assert f"more: hpclaunch logs {st['job_id']} --rank 1" in err
    logs = hl("logs", st["job_id"], cwd="/").stdout
    assert f"==> rank 1 (exit 3) on {HOST}:" in logs


def test_summary_shows_the_python_traceback_that_other_lines_followed(hpc_home, tmp_path):
    """A rank's traceback is often followed by other lines (torch's teardown warnings, Ray's relayed
    logs): the summary's last lines then miss the error, so it also shows the last traceback."""
    job = job_file(tmp_path, """
name: noisy end
launcher: srun
command: [bash, -c, 'python3 -c "import json; json.loads(chr(123))"; for i in $(seq 15); do echo "[W] teardown warning $i" >&2; done; exit 1']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
""")
    proc = submit_wait(tmp_path, job)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "| [W] teardown warning 15" in err and "| [W] teardown warning 5" not in err, err  # the last 10 lines
    tb = err.split("its last Python traceback, before those lines:\n")[1].splitlines()
    assert tb[0] == "    | Traceback (most recent call last):" and tb[-2].startswith("    | json.decoder.JSONDecodeError: "), tb
    assert tb[-1].startswith("  more: hpclaunch logs "), tb
    # a traceback that is among the last lines is not shown twice
    short = job_file(tmp_path, "name: plain end\nlauncher: srun\ncommand: [python3, -c, 'import json; json.loads(chr(123))']\n"
                               "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\nrequeue: {max_attempts: 1}\n",
                     "short.yaml")
    proc = submit_wait(tmp_path, short)
    assert proc.returncode == 1 and "JSONDecodeError" in proc.stderr and "its last Python traceback" not in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_segfault_reads_as_the_programs_not_as_the_wrappers(hpc_home, tmp_path, launcher):
    """Issue 45, item 6: bash's report of the killed rank ("hpclaunch-rank-run: line 8: ... Segmentation
    fault ( printf ... exec "$@" )") reached the rank log and the failure summary."""
    job = job_file(tmp_path, f"""
name: segfault
launcher: {launcher}
command: [{sys.executable}, -c, "print('step 3', flush=True); import ctypes; ctypes.string_at(0)"]
resources: {{nodes: 1, tasks_per_node: 2}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
    proc = submit_wait(tmp_path, job)
    st = status("segfault")
    err = proc.stderr
    assert st["state"] == "FAILED" and proc.returncode == 139, err   # the first failing rank's own code
    assert "| step 3\n" in err and re.search(r"\| hpclaunch: rank \d was killed by SIGSEGV \(a segmentation fault: "
                                              r"an invalid memory access\)(, core dumped)?; exit code 139\n", err), err
    logs = hl("logs", st["job_id"], cwd="/").stdout
    for words in ("hpclaunch-rank", "exec \"$@\"", "Segmentation fault"):
        assert words not in err and words not in logs, (words, err, logs)
    for r in (0, 1):
        text = open(os.path.join(st["run_dir"], "logs", "attempt0", f"rank{r}.log")).read()
        assert text.count("hpclaunch: rank") <= 1, text


def test_summary_of_a_rank_that_aborts_in_cxx_names_torchs_teardown_abort(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: aborts
launcher: srun
command: [bash, -c, 'echo "epoch 9 done"; echo "terminate called without an active exception" >&2; kill -ABRT $$']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
""")
    proc = submit_wait(tmp_path, job)
    assert proc.returncode == 134, proc.stderr
    assert "first failing rank: rank 0" in proc.stderr and "exit code 134" in proc.stderr, proc.stderr
    assert "after a finished DDP run, torch's abort in interpreter teardown" in proc.stderr, proc.stderr
    assert '"Ending a DDP program"' in proc.stderr


def test_summary_of_an_mpi_rank_dead_of_a_null_call_points_at_open_mpis_init_race(hpc_home, tmp_path):
    """Open MPI's own report of the crash, made for real: a call through a null function pointer ends
    its backtrace at the signal's frame, as the MPI_Init race does (docs/launch-modes.md); a segfault
    with frames (a program's own bad read) gets no such hint."""
    hint = "most likely its MPI_Init race"
    for name, call, hinted in (("null call", "ctypes.CFUNCTYPE(None)(0)()", True),
                               ("bad read", "ctypes.string_at(0)", False)):
        job = job_file(tmp_path, f"""
name: {name}
launcher: mpi
command: [python, -c, "from mpi4py import MPI; import ctypes; {call}"]
resources: {{nodes: 1, tasks_per_node: 1}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
        proc = submit_wait(tmp_path, job)
        assert proc.returncode == 139 and "Failing at address: (nil)" in proc.stderr + \
            open(re.search(r"its last lines \((.*)\):", proc.stderr).group(1)).read(), proc.stderr
        assert (hint in proc.stderr) == hinted, (name, proc.stderr)


def test_summary_when_no_rank_started_points_at_the_batch_log(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: no start
launcher: srun
command: [hostname]
workdir: /nonexistent/folder
monitor: {interval: 0}
requeue: {max_attempts: 1}
""")
    proc = submit_wait(tmp_path, job)
    st = status("no start")
    assert proc.returncode == 1 and st["state"] == "FAILED" and st["exit_code"] == 1, (proc.stderr, st)
    assert "no rank started; the batch log says:" in proc.stderr
    assert "cannot enter workdir" in proc.stderr, proc.stderr
    assert f"more: hpclaunch logs {st['job_id']}" in proc.stderr
    logs = hl("logs", st["job_id"], cwd="/").stdout
    assert "no rank logs" in logs and "==> batch log:" in logs and "cannot enter workdir" in logs, logs


def test_ctrl_c_leaves_the_job_running_then_cancel_and_cancel_again(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: long
launcher: srun
command: [bash, -c, 'echo up; sleep 120']
monitor: {interval: 0}
""")
    # Ctrl-C as a terminal delivers it: a test run started in the background (`cmd &` in a script)
    # has SIGINT ignored, and a Python started with it ignored keeps it so (no KeyboardInterrupt).
    follower = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", job, "--backend", "local", "--wait"],
                                cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert until(lambda: "RUNNING" in _list_states(), timeout=60)
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 130, err
    job_id = json.loads(hl("list", "--json", cwd="/").stdout)[0]["job_id"]
    assert f"interrupted: stopped following; local job {job_id} (long) goes on" in err, err
    assert f"hpclaunch logs {job_id} -f" in err and f"hpclaunch cancel {job_id}" in err
    assert status(job_id)["state"] == "RUNNING"                            # the job went on
    # cancel while it runs: --wait of another follower exits 125 (the local backend said 255)
    follower = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", job, "--backend", "local", "--wait"],
                                cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert until(lambda: _list_states().count("RUNNING") == 2, timeout=60)
    second = max((r for r in json.loads(hl("list", "--json", cwd="/").stdout)), key=lambda r: int(r["job_id"]))
    hl("cancel", second["job_id"], cwd="/")
    _, err = follower.communicate(timeout=60)
    assert follower.returncode == 125, err
    assert "ended CANCELLED, exit code 125" in err and "it was cancelled" in err, err
    out = hl("cancel", second["job_id"], cwd="/").stdout
    assert "already ended (CANCELLED); nothing to cancel" in out, out
    hl("cancel", job_id, cwd="/")
    assert until(lambda: status(job_id)["state"] == "CANCELLED", timeout=30)


def _list_states():
    return [r["state"] for r in json.loads(hl("list", "--all", "--json", cwd="/").stdout)]


def test_list_refreshes_active_rows_with_one_call_per_backend(hpc_home, tmp_path, run_cli, monkeypatch):
    from hpclaunch.runs import jobs
    from hpclaunch.runs.registry import Registry

    reg = Registry()
    for i in range(5):
        run_dir = tmp_path / f"r{i}"
        run_dir.mkdir()
        reg.add(backend="slurm", cluster="c", job_id=str(100 + i), name=f"sub{i}", run_dir=str(run_dir))
    calls = []

    class Fake:
        def statuses(self, refs):
            calls.append([r.job_id for r in refs])
            return [JobStatus(State.COMPLETED if r.job_id != "104" else State.RUNNING, 0) for r in refs]

        def status(self, ref):
            raise AssertionError("one job at a time")

    monkeypatch.setattr(jobs, "get_backend", lambda name: Fake())
    code, out, _ = run_cli("list", "--all", "--json")
    assert code == 0 and [sorted(c) for c in calls] == [["100", "101", "102", "103", "104"]], calls
    assert {r["job_id"]: r["state"] for r in json.loads(out)} == {
        "100": "COMPLETED", "101": "COMPLETED", "102": "COMPLETED", "103": "COMPLETED", "104": "RUNNING"}
    calls.clear()
    run_cli("list", "--all")
    assert calls == [["104"]]                      # ended rows are not asked about again
