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
