"""Issue 49 on one machine (CPU, gloo): ZeRO stages 1-3 train as DDP does, their checkpoints are
every rank's shards with no pickle, resume at another world size and stage, and export whole.
The cluster tests (tests/test_zero_cluster.py) do the same on 2 nodes x 2 ranks."""
import glob
import json
import os
import pickle
import random
import re
import shutil
import subprocess

import pytest
from conftest import PY, rank_env, run, torchrun_cmd
from hlcli import hl

from hpclaunch.train_entry.metrics import read_metrics
from zero_oracle import assembled_logits

QUIET = ("--no-tensorboard", "--no-mlflow", "--dist-timeout", 60)
# the same optimizer steps at any world size: a fixed global batch, no LR scaling, no dropout
SAME_STEPS = ("--global-batch", 96, "--batch-size", 16, "--lr-scaling", "none", "--dropout", 0, "--log-every", 1)


def records(run_dir, kind):
    out = []
    for f in sorted(glob.glob(os.path.join(run_dir, "metrics", "rank*.jsonl"))):
        out += [r for r in read_metrics(f) if r["kind"] == kind]
    return out


def global_losses(run_dir):
    """{step: loss over every rank's samples} from the step records (one per step: --log-every 1)."""
    sums = {}
    for r in records(run_dir, "step"):
        s = sums.setdefault(r["step"], [0.0, 0])
        s[0] += r["loss"] * r["samples"]
        s[1] += r["samples"]
    return {k: v[0] / v[1] for k, v in sums.items()}


def last_val(run_dir):
    return [r for r in records(run_dir, "epoch") if r["rank"] == 0][-1]["val_accuracy"]


def train(nproc, run_dir, *args, timeout=240):
    cmd = torchrun_cmd(nproc, "--data", "digits", "--run-dir", run_dir, *QUIET, *args) if nproc > 1 else \
        [PY, "-m", "hpclaunch.train_entry", "--data", "digits", "--run-dir", run_dir, *QUIET, *args]
    return run(cmd, timeout=timeout)


@pytest.fixture(scope="module")
def stage_runs(tmp_path_factory):
    """The MLP on digits, 2 ranks, 2 epochs, one run per stage, every step recorded."""
    base = tmp_path_factory.mktemp("stages")
    out = {}
    for stage in (0, 1, 2, 3):
        r = train(2, base / f"zero{stage}", "--epochs", 2, "--zero", stage, "--log-every", 1)
        assert r.returncode == 0, r.stdout[-3000:]
        out[stage] = base / f"zero{stage}"
    return out


def test_every_stage_trains_as_ddp_does(stage_runs):
    ddp = global_losses(stage_runs[0])
    assert len(ddp) == 22
    for stage in (1, 2, 3):
        got = global_losses(stage_runs[stage])
        assert sorted(got) == sorted(ddp)
        worst = max(abs(got[k] - ddp[k]) for k in ddp)
        assert worst < 1e-5, (stage, worst)
        assert abs(last_val(stage_runs[stage]) - last_val(stage_runs[0])) < 0.005


def test_each_rank_holds_its_share_of_the_state(stage_runs):
    """From the memory records (the tensors each rank holds at its first step): ZeRO-1 shards the
    optimizer state, 2 and 3 also the parameters and gradients; the report shows the same figures."""
    def held(stage):
        mem = {r["rank"]: r for r in records(stage_runs[stage], "memory") if r["step"] == 1}
        assert sorted(mem) == [0, 1]
        return mem

    ddp = held(0)
    params = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert ddp[0]["params_bytes"] == ddp[0]["grads_bytes"] == 4 * params
    assert ddp[0]["optimizer_bytes"] == 2 * 4 * params + 6 * 4       # exp_avg, exp_avg_sq, 6 step scalars
    one = held(1)
    assert one[0]["params_bytes"] == ddp[0]["params_bytes"]          # whole parameters per rank
    assert one[0]["optimizer_bytes"] + one[1]["optimizer_bytes"] == ddp[0]["optimizer_bytes"]
    for stage in (2, 3):
        mem = held(stage)
        assert mem[0]["params_bytes"] + mem[1]["params_bytes"] == 4 * params
        assert max(m["state_bytes"] for m in mem.values()) <= 0.51 * ddp[0]["state_bytes"]
    doc = json.loads(hl("report", str(stage_runs[3]), "--format", "json").stdout)
    shown = {r["rank"]: r["memory"]["state_mib"] for r in doc["ranks"]}
    assert shown == {r: round(m["state_bytes"] / 2 ** 20, 3) for r, m in held(3).items()}
    text = hl("report", str(stage_runs[3])).stdout
    assert "Memory per rank" in text and f"{shown[0]:.2f}" in text.split("Memory per rank")[1]


def test_a_sharded_checkpoint_is_shards_and_json_only(stage_runs):
    ck = sorted(glob.glob(str(stage_runs[3] / "checkpoints" / "step-*")))[-1]
    names = sorted(os.listdir(ck))
    assert names == ["manifest.json", "rng-rank0.json", "rng-rank1.json", "shard-00001-model-00001-of-00001.safetensors",
                     "shard-00002-model-00001-of-00001.safetensors", "trainer.json"]
    manifest = json.load(open(os.path.join(ck, "manifest.json")))
    assert (manifest["format"], manifest["zero"], manifest["world_size"]) == ("sharded", 3, 2)
    assert sorted(manifest["files"]) == [n for n in names if n != "manifest.json"]
    from safetensors import safe_open

    for name in names:   # nothing but JSON and safetensors: no pickle anywhere
        path = os.path.join(ck, name)
        if name.endswith(".json"):
            json.load(open(path))
        else:
            with safe_open(path, framework="pt") as f:
                assert any(k.startswith("model.") for k in f.keys()) and json.loads(f.metadata()["DCP_SHARDING_INFO"])


def test_resume_across_world_sizes_and_stages_goes_on_as_if_uninterrupted(tmp_path):
    """The transformer: uninterrupted at 2 ranks (DDP), against a run stopped (the requeue exit) at
    2 ranks with ZeRO-3, resumed at 1 rank with ZeRO-1, stopped again, finished at 3 ranks with
    ZeRO-2: every step's loss within 1e-5, the same step count, the same final accuracy."""
    model = ("--model", "transformer", "--size", "tiny", "--epochs", 2, *SAME_STEPS)
    whole = tmp_path / "whole"
    assert train(2, whole, *model, "--zero", 0).returncode == 0
    hops = tmp_path / "hops"
    r = train(2, hops, *model, "--zero", 3, "--stop-after-step", 5)
    assert r.returncode != 0 and os.path.exists(hops / ".hpclaunch" / "requeue-exit.attempt0"), r.stdout[-3000:]
    r = train(1, hops, *model, "--zero", 1, "--stop-after-step", 17)
    assert r.returncode == 75, r.stdout[-3000:]
    assert "with the same global batch 96: epoch 0 goes on after its step 5" in r.stdout
    r = train(3, hops, *model, "--zero", 2)
    assert r.returncode == 0, r.stdout[-3000:]
    a, b = global_losses(whole), global_losses(hops)
    assert sorted(a) == sorted(b) == list(range(1, 29))
    worst = max(abs(a[k] - b[k]) for k in a)
    assert worst < 1e-5, worst
    assert abs(last_val(whole) - last_val(hops)) < 1e-9
    assert [h["world_size"] for h in records(hops, "header") if h["rank"] == 0] == [2, 1, 3]


class Boom:
    """A pickle that, if it were ever loaded, would leave a file behind."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_no_pickle_in_a_run_directory_is_ever_loaded(tmp_path, require):
    """DCP's own format keeps its metadata in a pickle (.metadata); one planted in the checkpoint,
    and an unlisted extra shard, are never read: resume and export use only the listed shards."""
    from hpclaunch.train_entry.export import missing_packages

    run_dir = tmp_path / "run"
    assert train(2, run_dir, "--epochs", 1, "--zero", 3, "--model", "transformer", "--size", "tiny").returncode == 0
    ck = glob.glob(str(run_dir / "checkpoints" / "step-*"))[0]
    marker = tmp_path / "executed"
    with open(os.path.join(ck, ".metadata"), "wb") as f:
        pickle.dump(Boom(str(marker)), f)
    shutil.copy(os.path.join(ck, "shard-00001-model-00001-of-00001.safetensors"),
                os.path.join(ck, "shard-00003-model-00001-of-00001.safetensors"))
    r = train(2, run_dir, "--epochs", 2, "--zero", 3, "--model", "transformer", "--size", "tiny")
    assert r.returncode == 0 and "resuming from" in r.stdout, r.stdout[-3000:]
    missing = missing_packages()
    require(", ".join(missing) or None, "the sharded export")
    hl("export", str(run_dir), "--step", os.path.basename(ck).split("-")[1])
    assert not marker.exists()


def test_export_of_a_zero3_run_assembles_the_whole_model(tmp_path, require):
    import numpy as np

    from hpclaunch.train_entry.export import missing_packages

    require(", ".join(missing_packages()) or None, "the sharded export")
    run_dir = tmp_path / "run"
    r = train(2, run_dir, "--epochs", 2, "--zero", 3, "--model", "transformer", "--size", "tiny", "--export", "onnx")
    assert r.returncode == 0, r.stdout[-3000:]
    desc = json.load(open(run_dir / "exports" / "model.json"))
    assert desc["check"]["max_abs_diff"] < 1e-4, desc["check"]
    import onnxruntime as ort

    x = np.random.default_rng(0).random((200, 64), dtype=np.float32)
    got = ort.InferenceSession(str(run_dir / "exports" / "model.onnx"),
                               providers=["CPUExecutionProvider"]).run(None, {"features": x})[0]
    want = assembled_logits(str(run_dir / "checkpoints" / f"step-{desc['step']}"), x)
    assert np.abs(got - want).max() < 1e-4 and (got.argmax(1) == want.argmax(1)).all()


def test_a_shard_whose_pieces_do_not_tile_the_tensor_is_refused(tmp_path):
    """A shard that says its piece of a weight starts elsewhere (the manifest rewritten to match) is
    named in one line; with nothing older to resume, exit 2."""
    import hashlib

    from safetensors.torch import load_file, save_file

    run_dir = tmp_path / "run"
    assert train(2, run_dir, "--epochs", 1, "--zero", 3).returncode == 0
    ck = glob.glob(str(run_dir / "checkpoints" / "step-*"))[0]
    name = "shard-00002-model-00001-of-00001.safetensors"
    path = os.path.join(ck, name)
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    info = json.loads(meta["DCP_SHARDING_INFO"])
    info["model.net.0.weight"]["saved_offsets"] = [0, 0]     # overlaps rank 0's piece, leaves a hole
    save_file(load_file(path), path, metadata={**meta, "DCP_SHARDING_INFO": json.dumps(info)})
    manifest = json.load(open(os.path.join(ck, "manifest.json")))
    data = open(path, "rb").read()
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    json.dump(manifest, open(os.path.join(ck, "manifest.json"), "w"))
    r = train(2, run_dir, "--epochs", 2, "--zero", 3)
    assert r.returncode != 0 and "exitcode  : 2" in r.stdout, r.stdout[-3000:]   # torchrun reports its own 1
    assert "the shards of model.net.0.weight do not make one whole tensor" in r.stdout
    assert "no checkpoint here can be resumed" in r.stdout and not re.search(r"\[rank\d\]: Traceback", r.stdout)


def test_stage_mismatch_and_unsupported_offload_are_one_line_each(tmp_path):
    r = train(1, tmp_path / "a", "--zero", 1, "--offload", "params")
    assert r.returncode == 2 and "offload needs FSDP2, which runs ZeRO stages 2 and 3" in r.stdout
    r = train(1, tmp_path / "a", "--zero", 3, "--offload", "optimizer")
    assert r.returncode == 2 and "PyTorch offers no optimizer-only offload" in r.stdout
    assert "Traceback" not in r.stdout
    whole = tmp_path / "whole"
    assert train(1, whole, "--epochs", 1).returncode == 0
    r = train(1, whole, "--epochs", 2, "--zero", 3)
    assert r.returncode == 2 and "a whole-model checkpoint (written with --zero 0)" in r.stdout, r.stdout[-2000:]


def test_one_process_offload_and_bf16_accumulation(tmp_path):
    """Alone (a process group of one), with FSDP2's CPU offload, bf16 (MixedPrecisionPolicy +
    autocast) and gradient accumulation: it trains, checkpoints and resumes."""
    args = ("--zero", 3, "--offload", "params", "--precision", "bf16", "--global-batch", 128, "--batch-size", 32)
    r = train(1, tmp_path / "r", "--epochs", 2, *args, "--stop-after-step", 15)
    assert r.returncode == 75, r.stdout[-3000:]
    r = train(1, tmp_path / "r", "--epochs", 3, *args)
    assert r.returncode == 0, r.stdout[-3000:]
    assert last_val(tmp_path / "r") > 0.5     # 33 steps at lr 1e-3: learning, not converged


def test_srun_and_mpirun_launch_zero(tmp_path, require):
    """The launchers hpclaunch renders for PyTorch besides torchrun: a fake srun step (SLURM_* as
    srun sets them) and mpirun (Open MPI)."""
    job_id = str(random.randint(100000, 999999))
    procs = [subprocess.Popen([PY, "-m", "hpclaunch.train_entry", "--data", "digits", "--epochs", "1", "--zero", "2",
                               "--run-dir", str(tmp_path / "srun"), *map(str, QUIET)],
                              env=rank_env(SLURM_JOB_ID=job_id, SLURM_JOB_NODELIST="localhost", SLURM_STEP_ID="0",
                                           SLURM_PROCID=r, SLURM_LOCALID=r, SLURM_NODEID=0, SLURM_NTASKS=2,
                                           SLURM_STEP_TASKS_PER_NODE="2"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out[-3000:]
    h = records(tmp_path / "srun", "header")[0]
    assert (h["launcher"], h["world_size"]) == ("srun", 2)
    require(None if shutil.which("mpirun") else "no mpirun on PATH (Open MPI: make deps)", "the mpirun test")
    env = rank_env(OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, OMPI_MCA_rmaps_base_oversubscribe=1,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=random.randint(30000, 39999))
    r = run(["mpirun", "-np", "2", "-x", "OMP_NUM_THREADS", "-x", "MASTER_ADDR", "-x", "MASTER_PORT", PY, "-m",
             "hpclaunch.train_entry", "--data", "digits", "--epochs", 1, "--zero", 3, "--run-dir", tmp_path / "mpi",
             *QUIET], env=env, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:]
    assert records(tmp_path / "mpi", "header")[0]["launcher"] == "mpi"


def test_the_zero_bench_runs_on_cpu(tmp_path):
    """bench/zero/bench_zero.py, made for a GPU machine, at its CPU smoke size (stages 0 and 3)."""
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                         "zero", "bench_zero.py")
    r = run([PY, bench, "--quick", "--stages", "0,3", "--json", tmp_path / "zero.json"], timeout=400)
    assert r.returncode == 0, r.stdout[-3000:]
    got = json.load(open(tmp_path / "zero.json"))
    assert got["0"]["samples_per_s"] > 0 and got["3"]["samples_per_s"] > 0
    assert got["3"]["state_mib"] < 0.55 * got["0"]["state_mib"]     # 2 ranks: half, and the step scalars
    assert "| 3 |" in r.stdout and "CPU smoke run" in r.stdout
