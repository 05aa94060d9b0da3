"""Deterministic mode: stop after step k + resume == uninterrupted run, bitwise (CPU, 1 process)."""
import os

from conftest import PY, rank_env, run

ARGS = ["--epochs", 3, "--deterministic", "--batch-size", 32, "--checkpoint-every", 7, "--global-batch", 64]


def _train(digits_csv, run_dir, *extra):
    return run([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", run_dir,
                *map(str, ARGS), *map(str, extra)], env=rank_env(), timeout=120)


def test_bitwise_equal_resume(tmp_path, digits_csv):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ra = _train(digits_csv, a)
    assert ra.returncode == 0, ra.stdout[-2000:]
    # 1437 train rows / 32 = 44 micro-batches = 22 optimizer steps per epoch (accumulation 2)
    rb1 = _train(digits_csv, b, "--stop-after-step", 30)   # mid-epoch 2, not on a checkpoint_every boundary
    assert rb1.returncode == 75, rb1.stdout[-2000:]
    assert "step-30" in os.listdir(os.path.join(b, "checkpoints"))
    rb2 = _train(digits_csv, b)
    assert rb2.returncode == 0, rb2.stdout[-2000:]
    assert "resuming from" in rb2.stdout and "step-30" in rb2.stdout
    final = "checkpoints/step-66/model.safetensors"
    with open(os.path.join(a, final), "rb") as fa, open(os.path.join(b, final), "rb") as fb:
        assert fa.read() == fb.read(), "resumed weights differ from the uninterrupted run"
    # the optimizer state matches too (Adam moments)
    import torch

    ta = torch.load(os.path.join(a, "checkpoints/step-66/trainer.pt"), weights_only=False)
    tb = torch.load(os.path.join(b, "checkpoints/step-66/trainer.pt"), weights_only=False)
    for k, v in ta["optimizer"]["state"].items():
        assert torch.equal(v["exp_avg"], tb["optimizer"]["state"][k]["exp_avg"])
    assert ta["state"] == tb["state"]
