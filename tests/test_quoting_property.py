"""Arbitrary strings in the name, the command's arguments and env values reach the rank process
byte for byte, through every launcher's rendered script, and nothing in them ever runs.

The launchers (srun, torchrun, mpirun, horovodrun) are replaced by a pass-through that runs the
rank command as the launcher would; the rank "program" records its argv and environment.
"""
import json
import os
import stat
import subprocess
import sys

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hpclaunch import runtime
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job

FAKES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")
# Characters no argv/env entry can carry (NUL) or UTF-8 cannot encode (surrogates).
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
PAYLOADS = ["$(touch {c})", "`touch {c}`", "; touch {c}", "'; touch {c}; '", "\"; touch {c}; \"",
            "\ntouch {c}\n", "$((1+1))", "${{HOME}}", "*", "~", "\\", "-e", "--", "é ü 漢字 🚀", " lead", "trail "]


def _strings(canary):
    return st.one_of(_text, st.sampled_from([p.format(c=canary) for p in PAYLOADS]),
                     st.builds(lambda a, b: a + b, _text, st.sampled_from([p.format(c=canary) for p in PAYLOADS])))


def _launch(tmp, launcher, name, args, env_values, check=assume):
    canary = os.path.join(tmp, "CANARY")
    job = {
        "name": name, "profile": "testcluster", "launcher": launcher,
        "command": [sys.executable, os.path.join(FAKES, "record.py")] + args,
        "env": {f"HL_VALUE_{i}": v for i, v in enumerate(env_values)},
        "monitor": {"interval": 0}, "resources": {"nodes": 1, "tasks_per_node": 1},
    }
    path = os.path.join(tmp, "job.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(job, f, allow_unicode=True)
    with open(path, encoding="utf-8") as f:
        check(yaml.safe_load(f) == job)  # only strings YAML itself round-trips
    script = os.path.join(tmp, "job.sbatch")
    with open(script, "w", encoding="utf-8") as f:
        f.write(render_job(resolve_job(path)))
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    for tool in ("srun", "torchrun", "mpirun", "horovodrun"):
        link = os.path.join(bindir, tool)
        if not os.path.exists(link):
            os.symlink(os.path.join(FAKES, "passthrough"), link)
    if not os.path.exists(os.path.join(bindir, "scontrol")):
        os.symlink(os.path.join(FAKES, "scontrol"), os.path.join(bindir, "scontrol"))
    record = os.path.join(tmp, "record.json")
    if os.path.exists(record):
        os.unlink(record)
    env = {"PATH": bindir + os.pathsep + os.environ["PATH"], "HL_RECORD": record, "SLURM_JOB_ID": "42",
           "HPCLAUNCH_PYTHON": sys.executable, "HPCLAUNCH_RUNTIME": runtime.path(),   # as submit_env() gives them
           "SLURM_JOB_NODELIST": "c1", "SLURM_JOB_NUM_NODES": "1", "SLURM_SUBMIT_DIR": tmp, "HOME": tmp}
    proc = subprocess.run(["bash", script], cwd=tmp, env=env, capture_output=True, timeout=60)
    return proc, record, canary


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data(), launcher=st.sampled_from(["torchrun", "horovod", "mpi", "srun"]))
def test_values_arrive_exactly(tmp_path_factory, data, launcher):
    tmp = str(tmp_path_factory.mktemp("q"))
    canary = os.path.join(tmp, "CANARY")
    strings = _strings(canary)
    name = data.draw(strings.filter(lambda s: s.strip()), label="name")
    args = data.draw(st.lists(strings, max_size=4), label="args")
    values = data.draw(st.lists(strings, min_size=1, max_size=3), label="env")
    proc, record, canary = _launch(tmp, launcher, name, args, values)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    with open(record, encoding="utf-8") as f:
        got = json.load(f)
    assert got["argv"] == args
    assert got["env"]["HPCLAUNCH_JOB_NAME"] == name
    for i, v in enumerate(values):
        assert got["env"][f"HL_VALUE_{i}"] == v
    assert not os.path.exists(canary), "a value was executed"
    run_dir = os.path.join(tmp, "runs")
    logs = [os.path.join(dp, f) for dp, _, fs in os.walk(run_dir) for f in fs if f.startswith("rank")]
    assert logs, "the rank log was not written"
    assert stat.S_IMODE(os.stat(os.path.dirname(logs[0])).st_mode) == 0o700


def _require(ok):
    assert ok


def test_injection_examples_all_launchers(tmp_path):
    """The classic payloads, deterministically, once per launcher."""
    for launcher in ("torchrun", "horovod", "mpi", "srun"):
        tmp = str(tmp_path / launcher)
        os.makedirs(tmp)
        canary = os.path.join(tmp, "CANARY")
        payloads = [p.format(c=canary) for p in PAYLOADS]
        proc, record, canary = _launch(tmp, launcher, payloads[3], payloads, payloads[:3], check=_require)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        with open(record, encoding="utf-8") as f:
            got = json.load(f)
        assert got["argv"] == payloads
        assert got["env"]["HPCLAUNCH_JOB_NAME"] == payloads[3]
        assert not os.path.exists(canary)
