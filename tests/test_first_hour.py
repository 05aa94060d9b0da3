"""A new user's first hour (issue 14): the small things that tripped a first run."""
import json
import os
import subprocess
import sys

from hlcli import hl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_validate_and_render_default_to_job_yaml_as_init_writes_it(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("init")
    assert code == 0 and os.path.exists("job.yaml"), err
    code, out, err = run_cli("validate")
    assert code == 0 and out.startswith("job.yaml: valid"), (out, err)
    code, out, err = run_cli("render")
    assert code == 0 and out.startswith("#!/bin/bash\n"), err


def test_validate_warns_that_a_dollar_in_env_is_not_expanded(run_cli, write):
    path = write("job.yaml", "name: j\ncommand: [python, t.py]\n"
                             "env: {DATA: $HOME/data, TAG: 'run-${SLURM_JOB_ID}', PLAIN: 'x'}\n")
    code, out, err = run_cli("validate", path)
    assert code == 0 and ": valid" in out, err
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("warning: env.DATA = '$HOME/data' is exported literally")
    assert "setup: lines" in lines[0] and "bash, -c" in lines[0]
    assert "env.TAG" in lines[1] and "PLAIN" not in err
    code, out, err = run_cli("validate", write("plain.yaml", "name: j\ncommand: [python, t.py]\nenv: {A: b}\n"))
    assert code == 0 and err == ""


def test_status_shows_a_job_that_just_ended_and_numbers_attempts_as_on_disk(hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text("name: just ended\nlauncher: srun\ncommand: [bash, -c, 'echo hi']\n"
                                       "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", cwd=str(tmp_path), check=False)
    assert done.returncode == 0, done.stderr
    assert "attempt 0" in done.stderr and "attempt 1" not in done.stderr, done.stderr
    out = hl("status", cwd="/").stdout
    assert "just ended" in out and "COMPLETED" in out and " attempt 0 " in out, out
    rows = json.loads(hl("status", "--json", cwd="/").stdout)
    assert [(r["name"], r["attempt"], r["attempts"]) for r in rows] == [("just ended", 0, 1)]
    assert os.path.isdir(os.path.join(rows[0]["run_dir"], "logs", f"attempt{rows[0]['attempt']}"))
    assert "rank 0" in hl("logs", "just ended", "--attempt", str(rows[0]["attempt"]), cwd="/").stdout
    # `list` still lists the active ones only; an hour later `status` says where the old ones are.
    assert "no jobs active" in hl("list", cwd="/").stdout
    import sqlite3
    db = sqlite3.connect(os.path.join(str(hpc_home), "registry.db"))
    db.execute("UPDATE jobs SET end_time = end_time - 7200, submit_time = submit_time - 7200")
    db.commit()
    db.close()
    assert "none ended in the last hour" in hl("status", cwd="/").stdout


def _submit_at_once(job, homes_and_dirs):
    procs = []
    for home, cwd in homes_and_dirs:
        procs.append(subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", str(job), "--backend", "local",
                                       "--wait", "--json"], cwd=str(cwd), env=dict(os.environ, HPCLAUNCH_HOME=str(home)),
                                      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    subs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, (out, err)
        subs.append(json.loads(out))
    return subs


def test_two_registries_start_torchrun_jobs_at_once_and_both_complete(tmp_path):
    # Job ids restart at 1 in every registry: ports derived from them collided (issue 14, item 6).
    job = tmp_path / "job.yaml"
    job.write_text(f"name: twin\nlauncher: torchrun\ncommand: [python, {ROOT}/examples/ddp_check.py, '3']\n"
                   "resources: {nodes: 1, tasks_per_node: 2}\nmonitor: {interval: 0}\n")
    for who in ("alice", "bob"):
        (tmp_path / who).mkdir()
    subs = _submit_at_once(job, [(tmp_path / who / "home", tmp_path / who) for who in ("alice", "bob")])
    assert [s["job_id"] for s in subs] == ["1", "1"], subs
    ports = []
    for sub in subs:
        state = open(os.path.join(sub["run_dir"], ".hpclaunch", "state")).read()
        ports.append(state.split(" port=")[1].split()[0])
        rank0 = open(os.path.join(sub["run_dir"], "logs", "attempt0", "rank0.log")).read()
        assert "params identical: True" in rank0, rank0
    assert ports[0] != ports[1], ports


def test_two_registries_in_one_folder_never_share_a_run_directory(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: same place\nlauncher: srun\ncommand: [bash, -c, 'sleep 1; echo $SLURM_JOB_ID >> mine']\n"
                   "workdir: .\nmonitor: {interval: 0}\n")
    subs = _submit_at_once(job, [(tmp_path / f"home{n}", tmp_path) for n in range(3)])
    run_dirs = sorted(s["run_dir"] for s in subs)
    assert len(set(run_dirs)) == 3 and not list(tmp_path.glob("runs/*.prev*")), run_dirs
    for sub in subs:
        assert os.path.isfile(os.path.join(sub["run_dir"], "script.sbatch"))
        assert json.loads(hl("status", sub["job_id"], "--json", env=dict(
            os.environ, HPCLAUNCH_HOME=str(tmp_path / f"home{subs.index(sub)}"))).stdout)["state"] == "COMPLETED"


def test_a_failing_site_setup_line_stops_the_job_named(hpc_home, tmp_path):
    (tmp_path / "hpc_profiles").mkdir()
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        "name: site\nextends: local\nsetup: ['export A=1', 'module load cuda/99', 'touch setup-went-on']\n")
    (tmp_path / "job.yaml").write_text("name: setup fails\nprofile: site\nlauncher: srun\n"
                                       "command: [touch, program-ran]\nmonitor: {interval: 0}\n")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp_path), check=False)
    assert done.returncode == 1, (done.stdout, done.stderr)
    sub = json.loads(done.stdout)
    assert json.loads(hl("status", sub["job_id"], "--json").stdout)["state"] == "FAILED"
    assert not (tmp_path / "setup-went-on").exists() and not (tmp_path / "program-ran").exists()
    log = open(os.path.join(sub["run_dir"], "logs", "slurm.out")).read()
    assert ("hpclaunch: site setup of profile site failed at line 2: module load cuda/99 (exit 127); "
            "the job stops here") in log, log


def test_wait_says_something_during_a_long_run(hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text("name: quiet\nlauncher: srun\nmonitor: {interval: 0}\ncommand: [python, -c, "
                                       "\"import time; print('epoch 1 \\x1b[31mloss\\x1b[0m 0.5', flush=True); "
                                       "time.sleep(5)\"]\n")
    env = dict(os.environ, HPCLAUNCH_HEARTBEAT_S="2")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", cwd=str(tmp_path), env=env)
    beats = [line for line in done.stderr.splitlines() if "RUNNING, attempt 0: " in line]
    assert beats and beats[-1].endswith("RUNNING, attempt 0: epoch 1 [31mloss [0m 0.5"), done.stderr
