"""CLI behaviour in one process: precision/accumulation paths, limit errors, exit codes."""
import os

from conftest import PY, rank_env, run
from hpclaunch.train_entry.metrics import read_metrics


def _cli(*args, env=None):
    return run([PY, "-m", "hpclaunch.train_entry", *map(str, args)], env=env or rank_env(), timeout=90)


USER_MODEL = """
import torch
def make(in_features, num_classes):
    return torch.nn.Sequential(torch.nn.Linear(in_features, 32), torch.nn.Tanh(), torch.nn.Linear(32, num_classes))
"""


def test_bf16_with_gradient_accumulation_and_user_model(tmp_path, digits_csv):
    (tmp_path / "usermodel.py").write_text(USER_MODEL)
    r = _cli("--data", digits_csv, "--run-dir", tmp_path, "--epochs", 2, "--batch-size", 32, "--global-batch", 128,
             "--precision", "bf16", "--lr-scaling", "sqrt", "--warmup-steps", 3, "--checkpoint-every", 5,
             "--model", "usermodel:make", "--log-every", 1, env=rank_env(PYTHONPATH=tmp_path))
    assert r.returncode == 0, r.stdout[-2000:]
    recs = read_metrics(os.path.join(tmp_path, "metrics", "rank0.jsonl"))
    assert recs[0]["accum_steps"] == 4 and recs[0]["global_batch"] == 128
    assert recs[0]["params"] == 64 * 32 + 32 + 32 * 10 + 10
    steps = [x for x in recs if x["kind"] == "step"]
    assert len(steps) == 2 * (1437 // 32 // 4) and all(x["samples"] == 128 for x in steps)
    assert steps[0]["lr"] < steps[3]["lr"]          # warmup
    assert os.path.exists(os.path.join(tmp_path, ".hpclaunch", "finished"))


def test_limits_from_job_yaml_fail_with_exit_2(tmp_path, digits_csv):
    (tmp_path / "job.yaml").write_text(
        "profile:\n  limits: {max_epochs: 5, max_batch_per_gpu: 64, lr_range: [0.0001, 0.01]}\n"
        "train: {epochs: 3}\n")
    env = rank_env(HPCLAUNCH_RUN_DIR=tmp_path)
    r = _cli("--data", digits_csv, "--batch-size", 128, env=env)
    assert r.returncode == 2 and "profile.limits.max_batch_per_gpu=64" in r.stdout, r.stdout[-2000:]
    r = _cli("--data", digits_csv, "--epochs", 6, env=env)
    assert r.returncode == 2 and "max_epochs=5" in r.stdout
    r = _cli("--data", digits_csv, "--precision", "fp16", env=env)
    assert r.returncode == 2 and "fp16 needs a CUDA device" in r.stdout
    r = _cli("--data", digits_csv, "--label-column", "nope", env=env)
    assert r.returncode == 2 and "no label column 'nope'" in r.stdout
    assert not os.path.exists(tmp_path / "checkpoints")
