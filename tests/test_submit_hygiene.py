"""Submission hygiene without a cluster: inherited Slurm settings dropped, secrets never written,
transient controller errors retried, and the Python API."""
import os
import stat

import pytest

from hpclaunch.launchers.backends import slurmcli
from hlcli import hl


def test_clean_env_drops_an_enclosing_jobs_settings():
    env = {"SLURM_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "3", "SBATCH_PARTITION": "gpu", "SRUN_CPUS_PER_TASK": "8",
           "SLURM_CPU_BIND": "cores", "PMIX_RANK": "0", "SLURM_CONF": "/etc/slurm/x.conf", "HOME": "/root",
           "PATH": "/usr/bin"}
    out = slurmcli.clean_env(env)
    assert out == {"SLURM_CONF": "/etc/slurm/x.conf", "HOME": "/root", "PATH": "/usr/bin"}


def test_secrets_in_the_environment_are_never_written(hpc_home, tmp_path, files_containing):
    secret = "s3cr3t-value-never-on-disk"
    (tmp_path / "job.yaml").write_text(
        "name: secretive\nlauncher: srun\ncommand: [bash, -c, 'test -n \"$MY_API_TOKEN\" && echo token-seen']\n"
        "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    env = dict(os.environ, MY_API_TOKEN=secret)
    proc = hl("submit", "job.yaml", "--backend", "local", "--wait", check=False, cwd=str(tmp_path), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert files_containing(secret, tmp_path, hpc_home) == []
    logs = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "runs") for f in fs if f == "rank0.log"]
    assert open(logs[0]).read().strip() == "token-seen"   # passed through by name, to the job only


def _tool(tmp_path, name, script):
    """An executable stand-in for a Slurm command (these tests are of slurmcli.run's retries and
    timeouts, not of Slurm): its path."""
    tool = tmp_path / name
    tool.write_text(script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(tool)


def test_transient_errors_are_retried_then_succeed(tmp_path, monkeypatch):
    """A command that fails like a busy controller twice, then answers."""
    count = tmp_path / "count"
    tool = _tool(tmp_path, "flaky", f"""#!/bin/bash
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt 2 ]; then echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1; fi
echo 4242
""")
    monkeypatch.setenv("HPCLAUNCH_SLURM_RETRY_DELAY", "0.01")
    proc = slurmcli.run([tool])
    assert proc.stdout.strip() == "4242" and count.read_text().strip() == "3"


def test_permanent_errors_are_not_retried_and_say_why(tmp_path, monkeypatch):
    count = tmp_path / "count"
    tool = _tool(tmp_path, "refuse", f"#!/bin/bash\necho x >> {count}\n"
                                      "echo 'sbatch: error: Batch job submission failed: Invalid account or account/partition "
                                      "combination specified' >&2\nexit 1\n")
    with pytest.raises(slurmcli.SlurmError) as e:
        slurmcli.run([tool])
    assert "Invalid account" in str(e.value) and len(count.read_text().split()) == 1


def test_python_api(hpc_home, tmp_path, monkeypatch):
    import hpclaunch
    (tmp_path / "job.yaml").write_text("name: api\nlauncher: srun\ncommand: [bash, -c, 'echo from $SLURM_PROCID']\n"
                                       "resources: {nodes: 1, tasks_per_node: 2}\nmonitor: {interval: 0}\n")
    monkeypatch.chdir(tmp_path)
    job = hpclaunch.submit("job.yaml", ["env.X=1"], backend="local")
    st = job.wait(poll=0.2, timeout=120)
    assert st.state == "COMPLETED" and job.status().exit_code == 0
    assert "from 0" in job.logs(rank=0) and "from 1" in job.logs(rank=1)
    assert isinstance(job, hpclaunch.Job) and job.id and os.path.isdir(job.run_dir)


def _hl(*args, cwd, env=None):
    return hl(*args, cwd=str(cwd), env=env, check=False, timeout=60)


TINY = "name: tiny\nlauncher: srun\ncommand: ['true']\nresources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n"


def test_a_runs_root_that_cannot_be_created_is_one_line_and_nothing_starts(hpc_home, tmp_path):
    (tmp_path / "afile").write_text("")
    (tmp_path / "job.yaml").write_text(TINY + "runs_root: afile/runs\n")
    proc = _hl("submit", "job.yaml", "--backend", "local", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    assert proc.stderr.strip() == (f"job.yaml: runs_root: cannot create {tmp_path}/afile/runs: {tmp_path}/afile is a "
                                   "file, not a folder ('afile/runs') \u2014 set runs_root to a folder you can write, "
                                   "e.g. runs_root: runs")
    # from the command line, the error names the override
    proc = _hl("submit", "job.yaml", "--backend", "local", "-o", "runs_root=afile/x", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("command line (-o runs_root): runs_root: cannot create")
    # nothing recorded, no local job id used up
    assert _hl("list", "--all", "--json", cwd=tmp_path).stdout.strip() == "[]"
    (tmp_path / "job.yaml").write_text(TINY)
    ok = _hl("submit", "job.yaml", "--backend", "local", "--json", "--wait", cwd=tmp_path)
    assert ok.returncode == 0 and '"job_id": "1"' in ok.stdout, ok.stderr


def test_an_unusable_hpclaunch_home_is_one_line(tmp_path):
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    (tmp_path / "job.yaml").write_text(TINY)
    env = dict(os.environ, HPCLAUNCH_HOME=str(home))
    for args in (["list"], ["status"], ["submit", "job.yaml", "--backend", "local"]):
        proc = _hl(*args, cwd=tmp_path, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.stderr.strip() == (f"{home}: cannot use the job registry: {home} is a file, not a folder \u2014 "
                                       "point $HPCLAUNCH_HOME at a folder you can write (or unset it)"), proc.stderr
    assert not (tmp_path / "runs").exists()   # submit stopped before making anything
    assert home.read_text() == ""


def test_the_job_files_hash_is_its_sha256():
    """The audit trail's "which file" (registry job_sha256): CPython's own SHA-256, not OpenSSL's via hashlib,
    to keep ~3 ms off a submission; the same digest."""
    import hashlib
    from hpclaunch.spec.loading import sha256_hex
    for data in (b"", b"a", b"x" * 55, b"y" * 64, os.urandom(1000), os.urandom(1 << 20)):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_command_stopped_at_its_timeout_says_what_slurm_said_and_is_not_retried(tmp_path, monkeypatch):
    """sbatch retries by itself while the controller refuses new jobs (its queue at MaxJobCount): stopped
    at the timeout, its last word is the user's line, not "see Slurm's message above" over nothing, and
    the user does not wait through retries of a command that was already retrying."""
    count = tmp_path / "count"
    tool = _tool(tmp_path, "busy", f"#!/bin/bash\necho x >> {count}\n"
                                    "echo 'sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying.' >&2\n"
                                    "exec sleep 30\n")
    monkeypatch.setenv("HPCLAUNCH_SLURM_RETRY_DELAY", "0.01")
    with pytest.raises(slurmcli.SlurmError) as e:
        slurmcli.run([tool, "--parsable"], timeout=1)
    line = str(e.value)
    assert "Slurm temporarily unable to accept job" in line and "after 1 s" in line, line
    assert "try again later" in line and "above" not in line and "\n" not in line
    assert len(count.read_text().split()) == 1   # not run again


def test_a_command_stopped_at_its_timeout_without_a_word_says_so(tmp_path):
    tool = _tool(tmp_path, "mute", "#!/bin/bash\nexec sleep 30\n")
    with pytest.raises(slurmcli.SlurmError) as e:
        slurmcli.run([tool], timeout=1)
    assert "did not answer in 1 s" in str(e.value) and "scontrol ping" in str(e.value)
