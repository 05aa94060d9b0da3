"""Hostile checkpoints (issue 15): stale, corrupt, tampered and mismatched ones never cost the
newest valid checkpoint, never run code, and never make a resume continue another run."""
import json
import os
import pickle
import sys

from conftest import PY, rank_env, run

from hpclaunch.train_entry.checkpoint import CheckpointStore, verify

sys.path.insert(0, os.path.dirname(__file__))
from _ckpt_writer import payload  # noqa: E402

ARGS = ["--epochs", 1, "--batch-size", 64, "--checkpoint-every", 5, "--keep-checkpoints", 2]


def _save(store, step):
    return store.save(step, {"model.safetensors": payload(step, "model.safetensors"),
                             "trainer.pt": payload(step, "trainer.pt")},
                      {"rng-rank0.pt": payload(step, "rng-rank0.pt")}, {"epoch": 0, "world_size": 1})


def _train(digits_csv, run_dir, *extra):
    return run([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", run_dir,
                *map(str, ARGS), *map(str, extra)], env=rank_env(), timeout=180)


def test_prune_never_counts_corrupt_checkpoints_toward_keep(tmp_path):
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=2)
    for step in (100, 200):      # newer-numbered, but torn: their model file is cut short
        _save(store, step)
        path = os.path.join(store.step_dir(step), "model.safetensors")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        assert not verify(store.step_dir(step))[0]
    _save(store, 5)
    _save(store, 6)
    # before: the two corrupt ones took both places and every new checkpoint was deleted at once
    assert os.path.isdir(store.step_dir(6)) and os.path.isdir(store.step_dir(5)), store.list_steps()
    path, manifest, _ = store.latest_valid()
    assert path == store.step_dir(6) and manifest["step"] == 6
    _save(store, 7)
    assert {5, 6, 7} & set(store.list_steps()) == {6, 7}     # keep 2 valid: 5 goes, 6 and 7 stay


def test_no_resume_into_a_used_run_directory_starts_a_new_lineage(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    first = _train(digits_csv, rd, "--stop-after-step", 20)
    assert first.returncode == 75, first.stdout[-2000:]
    old_steps = sorted(os.listdir(os.path.join(rd, "checkpoints")))
    assert "step-20" in old_steps
    second = _train(digits_csv, rd, "--no-resume", "--stop-after-step", 10)
    assert second.returncode == 75, second.stdout[-3000:]
    ck = os.path.join(rd, "checkpoints")
    # the new run's checkpoint exists (before: the old run's higher steps won keep-2 and it was deleted)
    assert os.path.isdir(os.path.join(ck, "step-10")), os.listdir(ck)
    aside = [n for n in os.listdir(ck) if n.startswith("previous-")]
    assert len(aside) == 1 and "step-20" in os.listdir(os.path.join(ck, aside[0]))   # moved, not deleted
    # a requeue resumes this run's step 10, not the other run's step 20
    third = _train(digits_csv, rd, "--stop-after-step", 12)
    assert "resuming from" in third.stdout and "step-10" in third.stdout, third.stdout[-3000:]


class _Boom:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _retamper(ckdir):
    """Rewrite the manifest's hashes, as anyone who can write the run directory can."""
    from hpclaunch.train_entry.checkpoint import MANIFEST, sha256_file
    mpath = os.path.join(ckdir, MANIFEST)
    with open(mpath) as f:
        manifest = json.load(f)
    for name in manifest["files"]:
        p = os.path.join(ckdir, name)
        manifest["files"][name] = {"sha256": sha256_file(p), "size": os.path.getsize(p)}
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    assert verify(ckdir)[0]


def test_resume_never_runs_a_pickle_from_the_run_directory(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    first = _train(digits_csv, rd, "--stop-after-step", 10)
    assert first.returncode == 75, first.stdout[-2000:]
    steps = sorted(int(n.split("-")[1]) for n in os.listdir(os.path.join(rd, "checkpoints")) if n.startswith("step-"))
    newest = os.path.join(rd, "checkpoints", f"step-{steps[-1]}")
    marker = tmp_path / "pwned"
    with open(os.path.join(newest, "rng-rank0.pt"), "wb") as f:
        pickle.dump(_Boom(str(marker)), f)
    _retamper(newest)
    again = _train(digits_csv, rd, "--stop-after-step", 12)
    assert not marker.exists(), "resume executed code from a checkpoint"
    assert "not loadable as plain data" in again.stdout and "Traceback" not in again.stdout, again.stdout[-3000:]
    # the tampered one is named and skipped; the previous valid one is resumed
    assert f"resuming from {os.path.join(rd, 'checkpoints', f'step-{steps[-2]}')}" in again.stdout, again.stdout[-3000:]


def test_a_checkpoint_of_another_model_shape_is_named_and_skipped(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    first = _train(digits_csv, rd, "--stop-after-step", 10, "--hidden", 32)
    assert first.returncode == 75, first.stdout[-2000:]
    again = _train(digits_csv, rd, "--hidden", 64)
    assert again.returncode == 2, again.stdout[-3000:]
    assert "Traceback" not in again.stdout, again.stdout[-3000:]
    assert "do not fit this model" in again.stdout and "no checkpoint here can be resumed" in again.stdout
    # the mismatch itself, in one line per checkpoint (torch's message is one line per tensor)
    refusals = [x for x in again.stdout.splitlines() if "not used:" in x]
    assert len(refusals) == 2 and all("net.0.bias is [32] in the checkpoint but [64] in this model" in x
                                      and "--hidden" in x for x in refusals), again.stdout[-3000:]
    # nothing was deleted: both checkpoints of the first run are still there
    assert len([n for n in os.listdir(os.path.join(rd, "checkpoints")) if n.startswith("step-")]) == 2


def test_a_newest_checkpoint_of_another_shape_falls_back_to_the_previous_one(tmp_path, digits_csv):
    from safetensors.torch import save_model

    from hpclaunch.train_entry.model import MLP

    rd = str(tmp_path / "run")
    first = _train(digits_csv, rd, "--stop-after-step", 10, "--hidden", 32)
    assert first.returncode == 75, first.stdout[-2000:]
    newest = os.path.join(rd, "checkpoints", "step-10")
    save_model(MLP(64, 10, (48,)), os.path.join(newest, "model.safetensors"))   # a valid file, another shape
    _retamper(newest)
    again = _train(digits_csv, rd, "--hidden", 32, "--stop-after-step", 12)
    assert again.returncode == 75 and "Traceback" not in again.stdout, again.stdout[-3000:]
    assert f"checkpoint {newest} not used: the weights do not fit this model: net.0.bias is [48] in the " \
           "checkpoint but [32] in this model" in again.stdout, again.stdout[-3000:]
    assert f"resuming from {os.path.join(rd, 'checkpoints', 'step-5')}" in again.stdout, again.stdout[-3000:]


def test_weights_mismatch_names_the_first_difference(tmp_path):
    from safetensors.torch import save_model

    from hpclaunch.train_entry.checkpoint import weights_mismatch
    from hpclaunch.train_entry.model import MLP

    path = str(tmp_path / "model.safetensors")
    save_model(MLP(64, 10, (32,), dropout=0.1), path)          # net.0 Linear, net.3 Linear (net.2: dropout)
    assert weights_mismatch(MLP(64, 10, (32,), dropout=0.1), path) is None
    assert weights_mismatch(MLP(64, 10, (48,), dropout=0.1), path) == \
        "net.0.bias is [32] in the checkpoint but [48] in this model"
    assert weights_mismatch(MLP(64, 10, (32,), dropout=0.0), path) == \
        "the checkpoint has net.3.bias (and 1 more), which this model lacks"
    import torch
    save_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), path)
    assert weights_mismatch(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)), path) == \
        "this model has 1.bias (and 1 more), which the checkpoint lacks"
    with open(path, "wb") as f:
        f.write(b"not safetensors")
    assert weights_mismatch(MLP(64, 10, (32,)), path) is None   # the caller's own message stands
