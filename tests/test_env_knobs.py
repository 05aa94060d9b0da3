"""Numeric knobs from the environment (hpclaunch/common/envknobs.py, docs/environment.md): a bad
value is one line naming the variable, the value and the range, exit 2, before anything is queued;
never a traceback and never a silent default."""
import os
import subprocess
import sys

import pytest

from hpclaunch.common.envknobs import number
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import slurm_facts, slurmcli

BAD = ["abc", "nan", "inf", "-inf", "-1", "1e9", "0x10", "5 s"]


@pytest.mark.parametrize("raw", BAD)
def test_a_bad_value_names_the_variable_value_and_range(raw):
    with pytest.raises(HpclaunchError) as e:
        number("HPCLAUNCH_X", 60.0, 1, 86400, env={"HPCLAUNCH_X": raw})
    msg = str(e.value)
    assert "\n" not in msg and f"HPCLAUNCH_X={raw!r}" in msg and "from 1 to 86400" in msg, msg


def test_good_values_unset_and_empty():
    assert number("HPCLAUNCH_X", 60.0, 1, 86400, env={}) == 60.0
    assert number("HPCLAUNCH_X", 60.0, 1, 86400, env={"HPCLAUNCH_X": " "}) == 60.0
    assert number("HPCLAUNCH_X", 60.0, 1, 86400, env={"HPCLAUNCH_X": "2.5"}) == 2.5
    assert number("HPCLAUNCH_X", 4, 0, 20, integer=True, env={"HPCLAUNCH_X": "0"}) == 0
    with pytest.raises(HpclaunchError, match="whole number"):
        number("HPCLAUNCH_X", 4, 0, 20, integer=True, env={"HPCLAUNCH_X": "2.5"})


def test_slurm_knobs_are_checked_before_any_command_runs(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    monkeypatch.setenv("HPCLAUNCH_SLURM_RETRIES", "many")
    with pytest.raises(HpclaunchError, match="HPCLAUNCH_SLURM_RETRIES='many'"):
        slurmcli.run(["touch", str(marker)])
    monkeypatch.delenv("HPCLAUNCH_SLURM_RETRIES")
    monkeypatch.setenv("HPCLAUNCH_SLURM_RETRY_DELAY", "inf")  # was an endless backoff sleep
    with pytest.raises(HpclaunchError, match="HPCLAUNCH_SLURM_RETRY_DELAY='inf'"):
        slurmcli.run(["touch", str(marker)])
    assert not marker.exists()
    monkeypatch.setenv("HPCLAUNCH_SLURM_FACTS_MAX_AGE", "5min")  # was the default, silently
    with pytest.raises(HpclaunchError, match="HPCLAUNCH_SLURM_FACTS_MAX_AGE='5min'"):
        slurm_facts.max_age()


def test_submit_wait_with_a_bad_heartbeat_queues_nothing(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: j\ncommand: ['true']\nmonitor: {interval: 0}\n")
    env = dict(os.environ, HPCLAUNCH_HOME=str(tmp_path / "home"), HPCLAUNCH_HEARTBEAT_S="1m")
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", "submit", "--backend", "local", "--wait", str(job)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and "HPCLAUNCH_HEARTBEAT_S='1m'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")
