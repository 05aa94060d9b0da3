"""A local runner that dies before the job starts ends the job FAILED with its error within seconds;
`submit --wait` never waits on a dead runner (issue 43 item 5: it once waited forever on a runner
that could not import `hpclaunch.launchers`)."""
import json
import os
import subprocess
import sys
import time

from hlcli import hl, job_file

# The command line as the installed `hpclaunch` script runs it: the current folder is not on
# sys.path (-I), so the submission itself is unaffected by what is planted there; the runner it
# starts (`python -m ...`, in the job's folder) is not.
CLI = [sys.executable, "-I", "-c", "import sys; from hpclaunch.cli import main; sys.exit(main())"]


def _plant_an_unimportable_hpclaunch(folder):
    (folder / "hpclaunch").mkdir()
    (folder / "hpclaunch" / "__init__.py").write_text('raise ImportError("planted: no hpclaunch for this Python")\n')


def test_a_runner_that_cannot_import_ends_the_job_failed_with_its_error(hpc_home, tmp_path):
    _plant_an_unimportable_hpclaunch(tmp_path)
    job = job_file(tmp_path, "name: no runner\nlauncher: srun\ncommand: [bash, -c, 'echo ran']\n"
                             "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    env = dict(os.environ, HPCLAUNCH_HOME=str(hpc_home))
    start = time.monotonic()
    proc = subprocess.run(CLI + ["submit", job, "--backend", "local", "--wait"], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert took < 20, f"--wait took {took:.0f} s to see a dead runner"
    assert "ended FAILED" in proc.stderr and "planted: no hpclaunch for this Python" in proc.stderr, proc.stderr
    assert "the local runner died before the job started" in proc.stderr, proc.stderr
    st = json.loads(hl("status", "no runner", "--json", cwd="/").stdout)
    assert st["state"] == "FAILED" and "planted" in st["reason"], st
    assert not os.path.exists(os.path.join(st["run_dir"], "logs", "slurm.out"))  # the script never ran
    rows = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert [r["state"] for r in rows] == ["FAILED"]


def test_a_runner_that_fails_after_starting_records_why(hpc_home, tmp_path):
    """The runner imports, then cannot read its job (here: its spec is not JSON): FAILED, with why."""
    job = job_file(tmp_path, "name: bad spec\nlauncher: srun\ncommand: [bash, -c, 'sleep 30']\n"
                             "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    run_dir = sub["run_dir"]
    for _ in range(200):  # the runner has started the job: stop it, damage its spec, run the runner again
        if os.path.exists(os.path.join(run_dir, "logs", "slurm.out")):
            break
        time.sleep(0.05)
    hl("cancel", sub["job_id"], cwd="/")
    for _ in range(200):
        if json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)["state"] == "CANCELLED":
            break
        time.sleep(0.1)
    with open(os.path.join(run_dir, ".hpclaunch", "local-job.json"), "w") as f:
        f.write("{not json")
    os.unlink(os.path.join(run_dir, ".hpclaunch", "local.json"))
    runner = subprocess.run([sys.executable, "-m", "hpclaunch.launchers.backends.local_runner", run_dir],
                            capture_output=True, text=True, timeout=60)
    assert runner.returncode != 0 and "JSONDecodeError" in runner.stderr
    st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
    assert st["state"] == "FAILED" and "the local runner failed: JSONDecodeError" in st["reason"], st
