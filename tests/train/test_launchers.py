"""Non-torchrun launches end to end: mpirun (Open MPI env), a fake srun step, and the collective timeout."""
import json
import os
import random
import shutil
import signal
import subprocess
import time


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


def test_horovodrun_gloo_checkpoints_and_resumes(tmp_path, digits_csv, require):
    """The trainer under real horovodrun: DistributedOptimizer with accumulation, the same checkpoint
    format as DDP, a requeue stop and a resume that picks the run up where it stopped."""
    require(None if _horovod_available() else "horovod is not installed: run `make horovod`", "the horovod test")
    from hpclaunch.train_entry.checkpoint import CheckpointStore

    codes = tmp_path / "codes"
    codes.mkdir()
    # horovodrun reports any rank's non-zero exit as its own 1: each rank's code is kept beside it
    keep_code = ["bash", "-c", '"$@"; rc=$?; echo $rc >"$CODES/rank$HOROVOD_RANK"; exit $rc', "rank"]

    def hvd(*extra):
        return run([_horovodrun(), "--gloo", "-np", "2", "-H", "localhost:2", *keep_code, PY, "-m",
                    "hpclaunch.train_entry", "--data", digits_csv, "--epochs", 2, "--run-dir", tmp_path,
                    "--global-batch", 256, "--batch-size", 64, *extra], env=rank_env(CODES=codes), timeout=150)

    # 1437 train rows: 718 per rank, 11 micro-batches of 64, 5 optimizer steps (accumulation 2) per epoch
    first = hvd("--stop-after-step", 3)
    assert first.returncode != 0, first.stdout[-3000:]
    # a rank whose code is missing was killed by horovodrun after the other one exited 75
    seen = [(codes / f"rank{r}").read_text().strip() for r in (0, 1) if (codes / f"rank{r}").exists()]
    assert "75" in seen and set(seen) == {"75"}, (seen, first.stdout[-3000:])
    # so the batch shell learns of the request from train_entry's marker
    assert json.loads((tmp_path / ".hpclaunch" / "requeue-exit.attempt0").read_text())["step"] == 3
    path, manifest, _ = CheckpointStore(str(tmp_path / "checkpoints")).latest_valid()
    assert manifest["step"] == 3 and manifest["world_size"] == 2
    assert set(manifest["files"]) == {"model.safetensors", "trainer.pt", "rng-rank0.pt", "rng-rank1.pt"}
    second = hvd()
    assert second.returncode == 0, second.stdout[-3000:]
    assert "resuming from" in second.stdout and "step-3" in second.stdout
    for rank in (0, 1):
        recs = read_metrics(os.path.join(tmp_path, "metrics", f"rank{rank}.jsonl"))
        headers = [r for r in recs if r["kind"] == "header"]
        assert [(h["launcher"], h["backend"], h["world_size"], h["accum_steps"]) for h in headers] == \
            [("horovod", "horovod", 2, 2)] * 2
        assert headers[-1]["resumed_step"] == 3
        # every optimizer step of both attempts counted once: 3 before the stop, 7 after
        assert sum(r.get("steps", 1) for r in recs if r["kind"] == "step") == 10
    with open(tmp_path / ".hpclaunch" / "finished") as f:
        assert '"step": 10' in f.read()
