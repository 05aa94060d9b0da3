import os
import subprocess
import sys

import pytest

PY = sys.executable
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def rank_env(**extra):
    """A clean environment for a rank process: no launcher variables from the outside."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "HOROVOD_", "HPCLAUNCH_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun_cmd(nproc, *args):
    # --standalone: a local c10d rendezvous on a free port (no collisions between concurrent tests)
    cmd = [TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "--rdzv-conf=join_timeout=30"]
    return cmd + ["-m", "hpclaunch.train_entry", *map(str, args)]


def run(cmd, env=None, timeout=120, cwd=None):
    return subprocess.run([str(c) for c in cmd], env=env or rank_env(), timeout=timeout, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="session")
def digits_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "digits.csv"
    from hpclaunch.train_entry.digits import write_digits_csv

    assert write_digits_csv(str(path)) == 1797
    return str(path)
