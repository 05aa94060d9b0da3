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


def test_checkpoints_written_beside_training_equal_those_the_step_waited_for(tmp_path, digits_csv):
    """The default (fsync + publish in a thread, committed 10 steps later) captures each step's
    state exactly: every kept checkpoint is byte-identical to the --sync-checkpoints run's."""
    a, s = str(tmp_path / "async"), str(tmp_path / "sync")
    assert _train(digits_csv, a, "--keep-checkpoints", 10).returncode == 0
    assert _train(digits_csv, s, "--keep-checkpoints", 10, "--sync-checkpoints").returncode == 0
    steps = sorted(os.listdir(os.path.join(a, "checkpoints")))
    assert steps == sorted(os.listdir(os.path.join(s, "checkpoints")))
    # every 7 steps and at each epoch end (22, 44, 66); the newest 10 of the 12
    assert steps == sorted(f"step-{n}" for n in (7, 14, 21, 22, 28, 35, 42, 44, 49, 56, 63, 66)[-10:])
    from hpclaunch.train_entry.checkpoint import verify

    for step in steps:
        ok, _, ma = verify(os.path.join(a, "checkpoints", step))
        assert ok
        _, _, ms = verify(os.path.join(s, "checkpoints", step))
        assert {k: v["sha256"] for k, v in ma["files"].items()} == {k: v["sha256"] for k, v in ms["files"].items()}
