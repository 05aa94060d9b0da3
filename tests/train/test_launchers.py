"""Non-torchrun launches end to end: mpirun (Open MPI env), a fake srun step, and the collective timeout."""
import os
import random
import shutil
import signal
import subprocess
import time

import pytest

from conftest import PY, rank_env, run
from hpclaunch.train_entry.metrics import read_metrics


def test_mpirun_launch(tmp_path, digits_csv, require):
    require(None if shutil.which("mpirun") else "no mpirun on PATH (Open MPI: make deps)", "the mpirun test")
    env = rank_env(OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, OMPI_MCA_rmaps_base_oversubscribe=1,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=random.randint(30000, 39999))
    r = run(["mpirun", "-np", "2", "-x", "OMP_NUM_THREADS", "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
             PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--epochs", 1, "--run-dir", tmp_path,
             "--dist-timeout", 30], env=env, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    for rank in (0, 1):
        h = read_metrics(os.path.join(tmp_path, "metrics", f"rank{rank}.jsonl"))[0]
        assert (h["launcher"], h["backend"], h["world_size"], h["rank"]) == ("mpi", "gloo", 2, rank)


def test_fake_srun_step_and_collective_timeout(tmp_path, digits_csv):
    """Two ranks started the way srun starts them (master = first host of the node list, port from the
    job id, scontrol unusable here). Rank 1 is then frozen (SIGSTOP): rank 0 must give up after
    --dist-timeout instead of hanging."""
    job_id = str(random.randint(100000, 999999))
    procs = []
    for rank in (0, 1):
        env = rank_env(SLURM_JOB_ID=job_id, SLURM_JOB_NODELIST="localhost", SLURM_STEP_ID="0",
                       SLURM_PROCID=rank, SLURM_LOCALID=rank, SLURM_NODEID=0, SLURM_NTASKS=2,
                       SLURM_STEP_TASKS_PER_NODE="2")
        procs.append(subprocess.Popen([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--epochs", "500",
                                       "--run-dir", str(tmp_path), "--dist-timeout", "8"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        metrics = os.path.join(tmp_path, "metrics", "rank0.jsonl")
        deadline = time.time() + 90
        while time.time() < deadline:
            if os.path.exists(metrics) and sum(r.get("kind") == "step" for r in read_metrics(metrics)) >= 5:
                break
            time.sleep(0.05)
        h = read_metrics(metrics)[0]
        assert (h["launcher"], h["backend"], h["world_size"]) == ("srun", "gloo", 2)
        procs[1].send_signal(signal.SIGSTOP)
        t0 = time.time()
        out, _ = procs[0].communicate(timeout=60)
        waited = time.time() - t0
        assert procs[0].returncode not in (0, 75), out[-2000:]
        assert waited < 40, f"rank 0 needed {waited:.0f} s to give up"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _horovodrun():
    """horovodrun of this interpreter's environment (the venv need not be on PATH)."""
    import sys
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return beside if os.path.exists(beside) else shutil.which("horovodrun")


def _horovod_available():
    try:
        import importlib.util

        return importlib.util.find_spec("horovod.torch") is not None and _horovodrun() is not None
    except ModuleNotFoundError:
        return False


def test_horovodrun_gloo(tmp_path, digits_csv, require):
    require(None if _horovod_available() else "horovod is not installed: run `make horovod`", "the horovod test")
    r = run([_horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2", PY, "-m", "hpclaunch.train_entry",
             "--data", digits_csv, "--epochs", 2, "--run-dir", tmp_path, "--global-batch", 256, "--batch-size", 64],
            env=rank_env(), timeout=150)
    assert r.returncode == 0, r.stdout[-3000:]
    for rank in (0, 1):
        recs = read_metrics(os.path.join(tmp_path, "metrics", f"rank{rank}.jsonl"))
        assert (recs[0]["launcher"], recs[0]["backend"], recs[0]["world_size"], recs[0]["accum_steps"]) == \
            ("horovod", "horovod", 2, 2)
    assert os.path.exists(os.path.join(tmp_path, ".hpclaunch", "finished"))


def test_horovod_code_path_with_a_fake_horovod(tmp_path, digits_csv):
    """The Horovod integration (not horovod itself): wrapping, broadcasts, synchronize/skip_synchronize."""
    import json

    log = tmp_path / "hvd.log"
    fake = os.path.join(os.path.dirname(__file__), "fake_horovod")
    r = run([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--epochs", 1, "--run-dir", tmp_path,
             "--batch-size", 64, "--global-batch", 128],
            env=rank_env(PYTHONPATH=fake, HOROVOD_RANK=0, HOROVOD_SIZE=1, HOROVOD_LOCAL_RANK=0,
                         HOROVOD_LOCAL_SIZE=1, FAKE_HVD_LOG=log), timeout=90)
    assert r.returncode == 0, r.stdout[-3000:]
    events = [json.loads(line) for line in open(log)]
    names = [e["event"] for e in events]
    wrap = next(e for e in events if e["event"] == "DistributedOptimizer")
    assert wrap["backward_passes_per_step"] == 2 and wrap["named"] == 6
    assert "broadcast_parameters" in names and "broadcast_optimizer_state" in names
    steps = 1437 // 64 // 2
    assert names.count("synchronize") == steps and "step_without_skip" not in names
    h = read_metrics(os.path.join(tmp_path, "metrics", "rank0.jsonl"))[0]
    assert (h["launcher"], h["backend"], h["accum_steps"]) == ("horovod", "horovod", 2)
