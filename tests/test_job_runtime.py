"""The job runtime (hpclaunch/runtime/job.sh) on its own, without a cluster: each test sources it in
bash, as a rendered script does, and calls its functions with real processes (ranks, signals,
sockets). The same functions under Slurm: tests/test_job_contract_cluster.py, test_lifecycle_cluster.py."""
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from hpclaunch import runtime
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = socket.gethostname()
PY = sys.executable


def base_env(tmp_path, **extra) -> dict:
    """The environment of a local job's script (launchers/backends/local.py), none of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCLAUNCH_", "SLURM_"))}
    env.update(HPCLAUNCH_LOCAL="1", HPCLAUNCH_PYTHON=PY, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="localhost",
               SLURM_JOB_NUM_NODES="1", SLURM_SUBMIT_DIR=str(tmp_path), HPCLAUNCH_MAX_ATTEMPTS="3",
               HPCLAUNCH_REQUEUE_EXIT="75", HPCLAUNCH_REQUEUE_SIGNAL="USR2")
    env.update({k: v for k, v in extra.items() if v is not None})
    for k in [k for k, v in extra.items() if v is None]:
        env.pop(k, None)
    return env


def sh(tmp_path, code, *, env=None, timeout=60, **kw) -> subprocess.CompletedProcess:
    """CODE run by bash after sourcing the runtime under the rendered scripts' options; $0 is
    tmp_path/job.sbatch (which hl_run_dir copies when it exists)."""
    script = f'set -uo pipefail\n. {runtime.path()!r} {runtime.VERSION}\n{code}\n'
    return subprocess.run(["bash", "-c", script, str(tmp_path / "job.sbatch")], cwd=str(tmp_path),
                          env=env or base_env(tmp_path), capture_output=True, text=True, timeout=timeout, **kw)


def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash's log line says no "core dumped"


def rank(tmp_path, *command, env_extra=None, rank_env=None):
    """One rank through the rank wrapper, as a starter runs it: (wrapper's exit code, log text, .exit
    code, ranks.tsv text)."""
    body = sh(tmp_path, 'printf %s "$hl_rank_body"').stdout
    env = base_env(tmp_path, HPCLAUNCH_LOG_DIR=str(tmp_path), **(env_extra or {}))
    env.update(rank_env if rank_env is not None else {"RANK": "0"})
    p = subprocess.run(["bash", "-c", body, "hpclaunch-rank", *command], env=env, capture_output=True, text=True,
                       timeout=60, preexec_fn=no_core)
    r = (rank_env or {"RANK": "0"})
    name = next(iter(r.values()))
    log = (tmp_path / f"rank{name}.log").read_text()
    code = int((tmp_path / f"rank{name}.exit").read_text().split()[0])
    return p.returncode, log, code, (tmp_path / "ranks.tsv").read_text()


# --- the version: the script, the Python module and job.sh name one ---------------------------------

def test_the_script_the_module_and_the_library_name_one_version(tmp_path):
    script = render_job(resolve_job(os.path.join(ROOT, "tests", "golden", "job.yaml")))
    assert re.findall(r'\. "\$hl_runtime" (\d+)', script) == [str(runtime.VERSION)]
    lib = open(runtime.path()).read()
    assert re.findall(r"^hl_runtime_version=(\d+)$", lib, re.M) == [str(runtime.VERSION)]
    out = subprocess.run([PY, "-m", "hpclaunch.runtime", "--path"], capture_output=True, text=True, check=True)
    assert out.stdout == runtime.path() + "\n" and os.path.isfile(out.stdout.strip())
    out = subprocess.run([PY, "-m", "hpclaunch.runtime", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"{runtime.VERSION}\n"
    bad = subprocess.run([PY, "-m", "hpclaunch.runtime"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("asked", [str(runtime.VERSION + 1), "0", ""])
def test_a_script_rendered_for_another_runtime_stops_with_one_line(tmp_path, asked):
    p = subprocess.run(["bash", "-c", f'. "$HL_LIB" {asked}; echo went on'], capture_output=True, text=True,
                       env=dict(os.environ, HL_LIB=runtime.path()))
    assert p.returncode == 2 and p.stdout == "", p
    assert p.stderr.count("\n") == 1, p.stderr
    assert f"rendered for job runtime {asked or '(none)'}, but {runtime.path()} is runtime {runtime.VERSION}" \
        in p.stderr and "submit the job again" in p.stderr, p.stderr


def _script(tmp_path, command="true", **over):
    job = tmp_path / "job.yaml"
    job.write_text(f"name: rt\nprofile: local\nlauncher: srun\ncommand: ['{command}']\n"
                   "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    path = tmp_path / "job.sbatch"
    path.write_text(render_job(resolve_job(str(job))))
    return str(path)


@pytest.mark.parametrize("how", ["HPCLAUNCH_RUNTIME", "python -m hpclaunch.runtime"])
def test_a_script_finds_its_runtime(tmp_path, how):
    """Set by hpclaunch's backends (no Python started), or through the job's Python (plain sbatch)."""
    env = base_env(tmp_path, HPCLAUNCH_RUNTIME=runtime.path() if how == "HPCLAUNCH_RUNTIME" else None)
    p = subprocess.run(["bash", _script(tmp_path)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "runs" / "rt-7" / "logs" / "attempt0" / "rank0.exit").read_text().split()[0] == "0"


@pytest.mark.parametrize("where", ["a missing file", "a Python without hpclaunch"])
def test_a_script_without_its_runtime_says_so_in_one_line(tmp_path, where):
    env = base_env(tmp_path, HPCLAUNCH_RUNTIME=str(tmp_path / "nowhere" / "job.sh")) if where == "a missing file" \
        else base_env(tmp_path, HPCLAUNCH_PYTHON="false")
    p = subprocess.run(["bash", _script(tmp_path)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p
    assert p.stderr.startswith("hpclaunch: no job runtime (") and "HPCLAUNCH_PYTHON" in p.stderr, p.stderr
    assert ("nowhere/job.sh" in p.stderr) == (where == "a missing file")
    assert not (tmp_path / "runs").exists()      # nothing half-made


# --- the run directory, the attempt and the state lines ----------------------------------------------

def test_run_directory_attempt_and_state_lines(tmp_path):
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n# the script\n")
    flag = tmp_path / "runs" / "j-7" / ".hpclaunch" / "requeue-requested"
    flag.parent.mkdir(parents=True)
    flag.write_text("")                          # left by the last attempt: cleared
    env = base_env(tmp_path, SLURM_RESTART_COUNT="1", HPCLAUNCH_ATTEMPT_BASE="2")
    p = sh(tmp_path, 'hl_run_dir runs j\nhl_port=4242 hl_head_suffix=-ib\nhl_begin\n'
                     'echo "$HPCLAUNCH_RUN_DIR|$HPCLAUNCH_ATTEMPT|$HPCLAUNCH_LOG_DIR|$HPCLAUNCH_MASTER_ADDR:$HPCLAUNCH_MASTER_PORT"\n'
                     '(exit 0) &\nhl_end $!', env=env)
    run = tmp_path / "runs" / "j-7"
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{run}|3|{run}/logs/attempt3|localhost-ib:4242\n"
    assert all((run / d).is_dir() for d in ("logs/attempt3", "monitor", "metrics", "checkpoints", ".hpclaunch"))
    assert (run / "script.sbatch").read_text() == "#!/bin/bash\n# the script\n" and not flag.exists()
    start, end = (run / ".hpclaunch" / "state").read_text().splitlines()
    assert re.fullmatch(rf"\d+ attempt=3 start host={re.escape(HOST)} nodes=1 head=localhost-ib port=4242", start)
    assert re.fullmatch(r"\d+ attempt=3 end rc=0 outcome=completed", end)
    assert f"hpclaunch: job 7 attempt 3 on localhost; rank logs in {run}/logs/attempt3" in p.stderr


@pytest.mark.parametrize("extra,folder", [
    ({"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "2"}, "runs/j-9/task2"),
    ({"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "2", "HPCLAUNCH_ARRAY_OFFSET": "10",
      "HPCLAUNCH_SWEEP_ID": "5"}, "runs/j-5/task12"),   # the second array of a split sweep
    ({"HPCLAUNCH_RESUME_DIR": "{tmp}/earlier"}, "earlier"),  # resubmitted without a failed node
])
def test_run_directory_of_a_sweep_task_and_of_a_resubmitted_job(tmp_path, extra, folder):
    env = base_env(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in extra.items()})
    p = sh(tmp_path, 'hl_run_dir runs j; echo "$HPCLAUNCH_RUN_DIR ${hl_task:-}"', env=env)
    assert p.stdout.split()[0] == str(tmp_path / folder), p
    assert (tmp_path / folder / "logs" / "attempt0").is_dir()


def test_slurms_log_is_linked_from_the_run_directory_of_a_script_given_to_sbatch(tmp_path):
    out = tmp_path / "slurm-j-7.out"
    with open(out, "w") as f:
        p = subprocess.run(["bash", "-c", f'. {runtime.path()!r} 1; hl_run_dir {tmp_path}/runs j'],
                           env=base_env(tmp_path, HPCLAUNCH_LOCAL=None), stdout=f, stderr=subprocess.PIPE, text=True)
    link = tmp_path / "runs" / "j-7" / "logs" / "slurm.out"
    assert p.returncode == 0 and link.is_symlink() and os.path.samefile(link, out), p.stderr


def test_a_run_directory_that_cannot_be_made_stops_the_job(tmp_path):
    (tmp_path / "runs").write_text("a file, not a folder")
    p = sh(tmp_path, "hl_run_dir runs j; echo went on")
    assert p.returncode == 1 and "went on" not in p.stdout
    assert f"hpclaunch: cannot create the run directory {tmp_path}/runs/j-7" in p.stderr


# --- the rank wrapper: exit codes, ranks.tsv, the log ---------------------------------------------------

def test_a_rank_records_its_code_its_pid_and_its_output(tmp_path):
    rc, log, code, tsv = rank(tmp_path, "sh", "-c", "echo out; echo err >&2; exit 3", rank_env={"RANK": "2"})
    assert (rc, code, log) == (3, 3, "out\nerr\n")
    r, host, pid = tsv.rstrip("\n").split("\t")
    assert (r, host) == ("2", HOST) and pid.isdigit()


@pytest.mark.parametrize("rank_env,name", [
    ({"SLURM_PROCID": "5"}, "5"), ({"OMPI_COMM_WORLD_RANK": "4", "SLURM_PROCID": "5"}, "4"),
    ({"HOROVOD_RANK": "3", "PMI_RANK": "1"}, "3"), ({"RANK": "6", "PMIX_RANK": "2"}, "6")])
def test_the_rank_comes_from_its_starters_variable(tmp_path, rank_env, name):
    rank(tmp_path, "true", rank_env=rank_env)
    assert (tmp_path / f"rank{name}.exit").exists() and (tmp_path / "ranks.tsv").read_text().startswith(f"{name}\t")


SEGFAULT = [PY, "-c", "print('loading shard 7', flush=True); import ctypes; ctypes.string_at(0)"]


def test_a_segfault_is_told_once_in_hpclaunchs_words_not_bashs(tmp_path):
    """Issue 45, item 6: bash's report of a killed child ("hpclaunch-rank-run: line 8: 123
    Segmentation fault ( printf ...; exec "$@" )") reached the rank's log and the failure summary."""
    rc, log, code, _ = rank(tmp_path, *SEGFAULT)
    assert (rc, code) == (139, 139)
    assert log == ("loading shard 7\nhpclaunch: rank 0 was killed by SIGSEGV (a segmentation fault: an invalid "
                   "memory access); exit code 139\n"), log
    assert not list(tmp_path.glob(".rank*"))     # the wrapper's own stderr, read and removed


@pytest.mark.parametrize("sig,code,words", [("KILL", 137, "SIGKILL (not catchable: the out-of-memory killer"),
                                            ("ABRT", 134, "SIGABRT (an abort"), ("ALRM", 142, "SIGALRM;")])
def test_other_signals_that_kill_a_rank_are_told_the_same_way(tmp_path, sig, code, words):
    rc, log, recorded, _ = rank(tmp_path, "sh", "-c", f"echo started; kill -{sig} $$")
    assert (rc, recorded) == (code, code)
    lines = log.splitlines()
    assert lines[0] == "started" and len(lines) == 2 and lines[1].startswith(f"hpclaunch: rank 0 was killed by {words}")
    assert lines[1].endswith(f"exit code {code}") and "line" not in log, log


def test_a_rank_that_exits_139_of_its_own_is_not_said_to_be_killed(tmp_path):
    rc, log, code, _ = rank(tmp_path, "sh", "-c", "echo exiting; exit 139")
    assert (rc, code, log) == (139, 139, "exiting\n")


def test_a_command_not_found_is_said_in_hpclaunchs_words(tmp_path):
    rc, log, code, _ = rank(tmp_path, "pythn-not-installed", "train.py")
    assert (rc, code, log) == (127, 127, "hpclaunch: pythn-not-installed: command not found\n")


def test_the_rank_gets_no_descriptor_of_the_wrapper(tmp_path):
    rc, log, _, _ = rank(tmp_path, PY, "-c", "import os; print(sorted(map(int, os.listdir('/proc/self/fd'))))")
    assert rc == 0 and log == "[0, 1, 2, 3]\n", log        # 3: listdir's own


# --- the local step: hl_step without srun ------------------------------------------------------------

def test_a_local_step_runs_its_tasks_with_the_variables_srun_gives(tmp_path):
    p = sh(tmp_path, 'hl_step 3 --cpus-per-task=2 --kill-on-bad-exit=1 -- sh -c \'echo "$SLURM_PROCID $SLURM_LOCALID '
                     '$SLURM_NODEID $SLURM_NTASKS $SLURM_STEP_ID $SLURM_GTIDS $SLURM_STEP_NODELIST $SLURMD_NODENAME"'
                     ' > t$SLURM_PROCID\'; echo "rc=$?"; hl_step 1 -- sh -c \'echo $SLURM_STEP_ID > second\'')
    assert p.stdout == "rc=0\n", p.stderr
    for i in range(3):
        assert (tmp_path / f"t{i}").read_text() == f"{i} {i} 0 3 0 0,1,2 localhost {HOST}\n"
    assert (tmp_path / "second").read_text() == "1\n"


def test_a_local_step_ends_the_other_tasks_when_one_fails_and_says_its_code(tmp_path):
    start = time.monotonic()
    p = sh(tmp_path, 'hl_step 3 -- sh -c \'echo $$ > pid$SLURM_PROCID; [ "$SLURM_PROCID" = 1 ] && { sleep 0.5; exit 5; }; '
                     'exec sleep 30\'; echo "rc=$?"')
    assert p.stdout == "rc=5\n" and time.monotonic() - start < 20, p
    for i in (0, 2):
        pid = int((tmp_path / f"pid{i}").read_text())
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_local_step_whose_tasks_end_at_once_says_their_codes(tmp_path):
    """A task that ended while the next one started was reaped and dropped from bash's job table:
    `wait -n PID...` said "no such job" and 127 for it, and the step ended 127 (1 to 3 times in 200
    here), not the tasks' 0, nor the 3 of the one that failed (as a rank asking to be requeued, 75)."""
    p = sh(tmp_path, "ok=0 three=0\nfor i in $(seq 200); do\n"
                     "  hl_step 3 -- sh -c 'echo $SLURM_PROCID >/dev/null' && ok=$((ok + 1))\n"
                     "  hl_step 3 -- sh -c '[ $SLURM_PROCID = 1 ] && exit 3; exit 0'; [ $? = 3 ] && three=$((three + 1))\n"
                     'done\necho "$ok $three"', timeout=300)
    assert p.stdout == "200 200\n", (p.stdout, p.stderr[-2000:])


def test_hl_wait_keeps_the_status_when_a_trapped_signal_interrupts_it(tmp_path):
    p = sh(tmp_path, "trap 'hl_trapped=1' USR1\n(sleep 1; exit 7) &\nc=$!\n(sleep 0.3; kill -USR1 $$) &\n"
                     'hl_wait "$c"; echo "rc=$?"')
    assert p.stdout == "rc=7\n", p


# --- the requeue signal and SIGTERM --------------------------------------------------------------------

CATCHER = ("import os, signal, sys, time\n"
           "signal.signal(signal.SIGUSR2, lambda *a: (open(sys.argv[1], 'a').write('USR2\\n'), sys.exit(0)))\n"
           "open(sys.argv[1] + '.ready', 'w').close()\n"
           "time.sleep(30)\n")


def test_the_requeue_signal_reaches_each_running_rank_of_this_host_once(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "catch.py").write_text(CATCHER)
    procs = [subprocess.Popen([PY, str(tmp_path / "catch.py"), str(tmp_path / f"got{i}")]) for i in range(4)]
    try:
        for i in range(4):
            deadline = time.time() + 20
            while not (tmp_path / f"got{i}.ready").exists() and time.time() < deadline:
                time.sleep(0.02)
        # rank 2 has ended (its .exit is written): skipped; rank 3 is on another host: that host's step signals it
        (logs / "rank2.exit").write_text("0 1.0\n")
        (logs / "ranks.tsv").write_text("".join(f"{i}\t{HOST if i != 3 else 'elsewhere'}\t{p.pid}\n"
                                                for i, p in enumerate(procs)))
        p = sh(tmp_path, "hl_signal_ranks USR2", env=base_env(tmp_path, HPCLAUNCH_LOG_DIR=str(logs)))
        assert re.search(rf"hpclaunch: SIGUSR2 sent to 2 rank process\(es\) on {re.escape(HOST)}$", p.stderr), p.stderr
        for i in (0, 1):
            assert procs[i].wait(timeout=10) == 0 and (tmp_path / f"got{i}").read_text() == "USR2\n"
        time.sleep(0.3)
        assert procs[2].poll() is None and procs[3].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    empty = sh(tmp_path, "hl_signal_ranks USR2", env=base_env(tmp_path, HPCLAUNCH_LOG_DIR=str(tmp_path / "none")))
    assert "no rank process has started yet: none to signal" in empty.stderr


@pytest.mark.parametrize("mode,attempt,says,not_says", [
    ("signal_ranks=no by=hpclaunch", 0,
     ["the ranks get no signal (requeue.signal_ranks: false)", "hpclaunch requeues the job: attempt 1 comes next (attempts are numbered from 0"],
     ["passing it on"]),
    ("signal_ranks=yes by=hpclaunch", 2,
     ["passing it on to every rank process (requeue.signal_ranks)", "no rank process has started yet",
      "attempt 2 is the last (attempts are numbered from 0; requeue.max_attempts: 3)"], ["the ranks get no signal"]),
    ("signal_ranks=yes by=program", 0,
     ["passing it on", "requeue is the program's (requeue.by: program): hpclaunch will not requeue"],
     ["hpclaunch requeues"]),
])
def test_the_requeue_signal_in_each_mode(tmp_path, mode, attempt, says, not_says):
    """The batch shell gets the signal (--signal=B:...): it raises the flag, passes the signal on in the
    mode that asks for it, and says what happens next; a second signal changes nothing."""
    env = base_env(tmp_path, SLURM_RESTART_COUNT=str(attempt))
    p = sh(tmp_path, f"hl_run_dir runs j\nhl_requeue_mode {mode}\nkill -USR2 $$\nkill -USR2 $$\n"
                     'echo "signalled=$hl_signalled terminated=$hl_terminated"; ls "$HPCLAUNCH_REQUEUE_FLAG"\n'
                     "kill -TERM $$\necho \"terminated=$hl_terminated\"", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "signalled=USR2 terminated=" and p.stdout.splitlines()[2] == "terminated=1"
    for words in says:
        assert words in p.stderr, (words, p.stderr)
    for words in not_says:
        assert words not in p.stderr, (words, p.stderr)
    assert p.stderr.count("SIGUSR2: the time limit is near") == 1
    assert "SIGTERM: the job is being stopped" in p.stderr


def test_a_requeue_mode_the_runtime_does_not_know_stops_the_job(tmp_path):
    p = sh(tmp_path, "hl_requeue_mode signal_ranks=maybe; echo went on")
    assert p.returncode == 2 and "unknown setting 'signal_ranks=maybe'" in p.stderr and not p.stdout


# --- the rendezvous port ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def test_a_free_port_is_taken_as_it_is_and_a_held_one_skipped(tmp_path):
    port = _free_port()
    assert sh(tmp_path, f"hl_free_port {port} {port} 10 32").stdout == f"{port}\n"
    with socket.socket() as held:
        held.bind(("", port))
        held.listen()
        got = int(sh(tmp_path, f"hl_free_port {port} {port} 10 32").stdout)
    assert got != port and port < got < port + 10
    assert int(sh(tmp_path, "hl_free_port 0 0 1 0").stdout) > 0          # the kernel's


@pytest.mark.parametrize("env_extra,expect", [
    ({"HPCLAUNCH_RDZV_PORT": "1234"}, lambda p: p == 1234),               # the user's wins
    ({"HPCLAUNCH_LOCAL": None, "SLURM_JOB_ID": "123"}, lambda p: 20000 <= p < 30000),   # the job id's, in range
    ({}, lambda p: p > 0),                                                # local: the kernel's
    ({"HPCLAUNCH_PYTHON": "false", "HPCLAUNCH_LOCAL": None, "SLURM_JOB_ID": "123"}, lambda p: p == 20123),  # no Python
])
def test_the_rendezvous_port(tmp_path, env_extra, expect):
    p = sh(tmp_path, "hl_choose_port 20000 10000; echo $hl_port", env=base_env(tmp_path, **env_extra))
    assert expect(int(p.stdout)), p


# --- launchers' steps: TensorFlow's workers, Ray's cluster ------------------------------------------

def test_tensorflow_workers_move_to_ports_free_on_every_node_and_each_gets_its_index(tmp_path):
    """hl_tensorflow on the local backend: the rendezvous port is held, so the workers take the next
    base whose 2 ports are free, say so, and each worker's TF_CONFIG names both (with the host suffix)
    and its own index."""
    port = _free_port()
    show = "import json, os; c = json.loads(os.environ['TF_CONFIG']); print(c['cluster']['worker'], c['task'])"
    with socket.socket() as held:
        held.bind(("", port))
        held.listen()
        p = sh(tmp_path, f"hl_run_dir runs j\nhl_port={port}\nhl_begin\nhl_cmd=({PY} -c {show!r})\nhl_ctr=()\n"
                         "hl_ctr_opts=()\nhl_tensorflow 2 1 -ib &\nhl_end $!")
    assert p.returncode == 0, p.stderr
    assert f"TensorFlow workers: ports from {port} are taken on some node; using {port + 2}" in p.stderr
    logs = tmp_path / "runs" / "j-7" / "logs" / "attempt0"
    workers = [f"localhost-ib:{port + 2}", f"localhost-ib:{port + 3}"]
    for index in (0, 1):
        assert (logs / f"rank{index}.log").read_text() == f"{workers} {{'type': 'worker', 'index': {index}}}\n"


def test_a_ray_token_that_cannot_be_written_ends_the_attempt_as_a_failure(tmp_path):
    """hl_ray writes the job's own Ray token exclusively: an empty file in its place (not the job's)
    is not overwritten, and the attempt ends failed, with its state line and one log line."""
    token = tmp_path / "runs" / "j-7" / ".hpclaunch" / "ray-auth-token"
    token.parent.mkdir(parents=True)
    token.write_text("")
    p = sh(tmp_path, "hl_run_dir runs j\nhl_port=1\nhl_begin\nhl_cmd=(true)\nhl_ray 1 2 0 &\nhl_end $!",
           env=base_env(tmp_path, RAY_AUTH_MODE=None))
    assert p.returncode == 1 and f"cannot write the job's Ray token at {token}" in p.stderr, p.stderr
    assert token.read_text() == "" and "end rc=1 outcome=failed" in (token.parent / "state").read_text()


# --- the monitor ---------------------------------------------------------------------------------------

def test_the_monitor_starts_beside_the_job_and_stops_with_sigterm(tmp_path):
    p = sh(tmp_path, "hl_run_dir runs j\n"
                     "hl_monitor=(sh -c 'echo \"args: $*\"; trap \"echo final sample; exit 0\" TERM; "
                     "while :; do sleep 0.05; done' monitor --interval 1)\n"
                     "hl_monitor_start; sleep 0.5; hl_stop_monitor; echo stopped; echo $$")
    assert p.stdout.splitlines()[0] == "stopped", p
    log = (tmp_path / "runs" / "j-7" / "logs" / "attempt0" / "monitor.log").read_text()
    assert log == f"args: --interval 1 --parent-pid {p.stdout.split()[1]}\nfinal sample\n", log


# --- the end of an attempt: completed, stopped, requeued, gave up or failed --------------------------------

@pytest.mark.parametrize("rc,signalled,terminated,by,attempt,marks,outcome", [
    (0, "USR2", "", "hpclaunch", 0, [], "completed"),          # success after the signal: never requeued
    (143, "", "1", "hpclaunch", 0, [], "stopped"),              # SIGTERM: Slurm's to requeue or end
    (1, "USR2", "", "hpclaunch", 0, [], "requeued"),            # failed after the signal
    (1, "USR2", "", "hpclaunch", 2, [], "gave_up"),             # ... on the last attempt
    (75, "", "", "hpclaunch", 0, [], "requeued"),               # a rank asked
    (1, "", "", "hpclaunch", 0, ["requeue-exit.attempt0"], "requeued"),   # train_entry's marker (torchrun's 1)
    (1, "", "", "hpclaunch", 0, ["requeue-exit.attempt1"], "failed"),     # another attempt's marker
    (75, "USR2", "", "hpclaunch", 0, ["finished"], "failed"),   # the work is done
    (75, "USR2", "", "program", 0, [], "failed"),               # requeue.by: program: never hpclaunch's
    (3, "", "", "hpclaunch", 0, [], "failed"),
])
def test_the_requeue_decision(tmp_path, rc, signalled, terminated, by, attempt, marks, outcome):
    env = base_env(tmp_path, SLURM_RESTART_COUNT=str(attempt))
    touch = "".join(f'touch "$HPCLAUNCH_RUN_DIR/.hpclaunch/{m}"\n' for m in marks)
    p = sh(tmp_path, f"hl_run_dir runs j\n{touch}hl_requeue_mode by={by}\n"
                     f"hl_signalled={signalled} hl_terminated={terminated}\nhl_decide {rc}; echo $hl_outcome", env=env)
    assert p.stdout == f"{outcome}\n", p


@pytest.mark.parametrize("rc,by,code,words,state", [
    (75, "hpclaunch", 0, "requeueing (step exit code 75): attempt 1 comes next (numbered from 0", "outcome=requeued"),
    (3, "hpclaunch", 3, "the job step failed with exit code 3; rank logs in", "outcome=failed"),
])
def test_the_end_of_an_attempt_on_the_local_backend(tmp_path, rc, by, code, words, state):
    p = sh(tmp_path, f"hl_run_dir runs j\nhl_requeue_mode by={by}\n(exit {rc}) &\nhl_end $!\necho not reached")
    run = tmp_path / "runs" / "j-7"
    assert p.returncode == code and "not reached" not in p.stdout and words in p.stderr, p
    assert (run / ".hpclaunch" / "state").read_text().endswith(f"attempt=0 end rc={rc} {state}\n")
    assert (run / ".hpclaunch" / "requeue").exists() == (code == 0)   # the local runner's cue to run it again


def test_a_rank_that_asks_for_a_requeue_is_heard_when_srun_reports_its_peers_143(tmp_path):
    """Rank 0 exits 75 first; srun kills rank 1 (143) and reports 143 as the step's code (CI, the 2-node
    requeue test: the job ended FAILED, exit code 75). The ranks' .exit files say who asked: the attempt
    is requeued with the asking rank's code, and the log says why the step's code differs."""
    p = sh(tmp_path, 'hl_run_dir runs j\nhl_requeue_mode by=hpclaunch\n'
                     'printf "75 1.0\\n" >"$HPCLAUNCH_LOG_DIR/rank0.exit"\n'
                     'printf "143 1.1\\n" >"$HPCLAUNCH_LOG_DIR/rank1.exit"\n'
                     '(exit 143) &\nhl_end $!\necho not reached')
    run = tmp_path / "runs" / "j-7"
    assert p.returncode == 0 and "not reached" not in p.stdout, p
    assert "rank 0 exited 75 (requeue me); the step's exit code 143 is its peers'" in p.stderr, p.stderr
    assert (run / ".hpclaunch" / "state").read_text().endswith("attempt=0 end rc=75 outcome=requeued\n")
    assert (run / ".hpclaunch" / "requeue").exists()


@pytest.mark.parametrize("scontrol_rc,code,words", [(0, 0, "requeueing"), (1, 75, "scontrol requeue failed; the job ends here")])
def test_the_requeue_on_slurm_is_scontrol_requeue(tmp_path, scontrol_rc, code, words):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.args\nexit {scontrol_rc}\n')
    (bindir / "scontrol").chmod(0o755)
    env = base_env(tmp_path, HPCLAUNCH_LOCAL=None, PATH=f"{bindir}:{os.environ['PATH']}")
    p = sh(tmp_path, "hl_run_dir runs j\nhl_requeue_mode by=hpclaunch\n(exit 75) &\nhl_end $!", env=env)
    assert p.returncode == code and words in p.stderr, p
    assert (tmp_path / "scontrol.args").read_text() == "requeue 7\n"


def test_a_step_stopped_by_sigterm_is_left_to_slurm(tmp_path):
    p = sh(tmp_path, "hl_run_dir runs j\nhl_requeue_mode by=program\n(sleep 1; exit 143) &\nc=$!\n"
                     "(sleep 0.3; kill -TERM $$) &\nhl_end $c")
    assert p.returncode == 143, p
    assert "the step ended with exit code 143 after SIGTERM (cancelled, out of time, preempted or requeued by the " \
           "program)" in p.stderr
    assert (tmp_path / "runs" / "j-7" / ".hpclaunch" / "state").read_text().endswith("end rc=143 outcome=stopped\n")


def test_a_ranks_exit_file_has_its_time_without_forking_date(tmp_path):
    """At a time limit the step's SIGTERM reaches everything in the rank's shell at once; a date(1)
    forked for the .exit time then died and rank0.exit held '143 ' (CI, test_user_view_cluster). The
    time comes from bash itself: with no date on PATH the file still has it, in any locale."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "true", "hostname", "rm", "grep", "sleep"):
        os.symlink(subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip(),
                   bindir / tool)
    rc, _log, code, _ = rank(tmp_path, PY, "-c", "pass", env_extra={"PATH": str(bindir), "LC_ALL": "C"})
    fields = (tmp_path / "rank0.exit").read_text().split()
    assert rc == 0 and code == 0 and len(fields) == 2 and abs(float(fields[1]) - time.time()) < 60, fields
