"""Faults during training (issue 15): a loss that diverges and a disk that fills up stop the run in
one line, exit 1, and never cost the last good checkpoint (not pruned, not overwritten, no temp
directory left behind)."""
import errno
import json
import os
import subprocess

import pytest

from conftest import PY, rank_env, run, torchrun_cmd
from hpclaunch.train_entry import checkpoint as ckpt
from hpclaunch.train_entry.checkpoint import CheckpointError, CheckpointStore, verify

HERE = os.path.dirname(os.path.abspath(__file__))
QUIET = ["--epochs", "1", "--no-tensorboard", "--no-mlflow", "--quiet"]   # warnings and errors only


def _train(data, run_dir, *extra, env=None, main=None):
    cmd = [PY, "-m", "hpclaunch.train_entry"] if main is None else [PY, "-c", main]
    return run(cmd + ["--data", data, "--run-dir", run_dir, *QUIET, *map(str, extra)],
               env=env or rank_env(), timeout=180)


def _one_error_line(proc, code, *words):
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout[-3000:]}"
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and " ERROR " in lines[0], lines
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


def _steps(run_dir):
    ck = os.path.join(run_dir, "checkpoints")
    names = os.listdir(ck) if os.path.isdir(ck) else []
    assert not [n for n in names if n.startswith(".tmp-step-")], f"temp dir left behind: {names}"
    return sorted(int(n.split("-")[1]) for n in names if n.startswith("step-"))


def _finite_weights(ckdir):
    import torch
    from safetensors.torch import load_file

    assert verify(ckdir)[0], ckdir
    return all(torch.isfinite(t).all() for t in load_file(os.path.join(ckdir, "model.safetensors")).values())


def _snapshot(ckdir):
    return {n: open(os.path.join(ckdir, n), "rb").read() for n in sorted(os.listdir(ckdir))}


# --- the loss diverges ---------------------------------------------------------------------------

def _nan_env(at):
    return rank_env(NAN_AT=at, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))


def test_a_huge_learning_rate_stops_training_in_one_line(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    proc = _train(digits_csv, rd, "--lr", "1e30", "--checkpoint-every", 1)
    line = _one_error_line(proc, 1, "training diverged at step ", "lower --lr", "last checkpoint kept: none")
    # Adam's first step moves every weight by ~lr = 1e30: their L2 norm overflows float32 at once (or,
    # summed in a wider type, the next forward does: NaN)
    step, norm = line.split("at step ")[1].split()[0], line.split("the weights' norm is ")[1].split(";")[0]
    assert step in ("1", "2") and norm in ("inf", "nan"), line
    assert _steps(rd) == []       # nothing from those weights is kept (step 1's, if any, was dropped)
    events = [json.loads(x) for x in open(os.path.join(rd, "metrics", "rank0.jsonl"))]
    assert [e["kind"] for e in events if e["kind"] == "diverged"] == ["diverged"]


@pytest.mark.parametrize("nan_at,kept", [(7, 3), (8, 6)])
def test_the_checkpoint_before_the_divergence_is_kept(tmp_path, digits_csv, nan_at, kept):
    """Checkpoints every 3 steps, keep 1. NaN at step 7: step 6's weights gave it, so step 6 (in
    flight) is dropped and step 3 stays. NaN at step 8: step 6 fed a finite step 7 and is published."""
    rd = str(tmp_path / "run")
    proc = _train(digits_csv, rd, "--model", "_nan_model:build", "--checkpoint-every", 3, "--keep-checkpoints", 1,
                  env=_nan_env(nan_at))
    _one_error_line(proc, 1, f"training diverged at step {nan_at} ", "loss nan",
                    f"last checkpoint kept: {rd}/checkpoints/step-{kept}")
    assert _steps(rd) == [kept]
    assert _finite_weights(os.path.join(rd, "checkpoints", f"step-{kept}"))


def test_a_divergence_after_a_resume_leaves_the_resumed_checkpoint_as_it_was(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    args = ("--model", "_nan_model:build", "--keep-checkpoints", 1)
    first = _train(digits_csv, rd, *args, "--stop-after-step", 3, env=_nan_env(0))
    assert first.returncode == 75, first.stdout[-2000:]
    step3 = os.path.join(rd, "checkpoints", "step-3")
    before = _snapshot(step3)
    # resumed at step 3, a checkpoint every step: step 4's is in flight when step 5 goes NaN
    second = _train(digits_csv, rd, *args, "--checkpoint-every", 1, env=_nan_env(2))
    _one_error_line(second, 1, "training diverged at step 5 ", f"last checkpoint kept: {step3}")
    assert _steps(rd) == [3] and _snapshot(step3) == before     # neither pruned nor overwritten
    third = _train(digits_csv, rd, *args, env=_nan_env(0))           # and it is one to go on from
    assert third.returncode == 0, third.stdout[-2000:]
    assert "Traceback" not in third.stdout


def test_a_nan_on_one_rank_stops_every_rank_at_the_same_step(tmp_path, digits_csv):
    """The NaN loss is rank 1's alone; DDP's gradient all-reduce spreads it, the weights (the
    same on every rank) decide, and both ranks stop at that step with no collective left hanging."""
    rd = str(tmp_path / "run")
    env = _nan_env(6)
    env["NAN_RANK"] = "1"
    proc = run(torchrun_cmd(2, "--data", digits_csv, "--run-dir", rd, "--model", "_nan_model:build",
                            "--checkpoint-every", 3, "--keep-checkpoints", 1, "--dist-timeout", 30, *QUIET),
               env=env, timeout=150)
    # torchrun reports the failed workers with a traceback of its own; the ranks print none
    assert proc.returncode != 0 and "train_entry/" not in proc.stdout, proc.stdout[-3000:]
    lines = [x for x in proc.stdout.splitlines() if "training diverged" in x]
    assert len(lines) == 2 and {x[:8] for x in lines} == {"[rank 0]", "[rank 1]"}, proc.stdout[-3000:]
    assert "loss nan on rank 1" in "".join(lines)
    assert all("training diverged at step 6 " in x for x in lines), lines
    assert _steps(rd) == [3] and _finite_weights(os.path.join(rd, "checkpoints", "step-3"))


# --- the disk fills up under a checkpoint --------------------------------------------------------

def _payloads(step, size):
    blob = bytes([step % 251]) * size
    return {"model.safetensors": blob, "trainer.pt": blob[:size // 2]}, {"rng-rank0.pt": blob[:size // 4]}


def test_a_full_disk_during_the_writes_removes_the_temp_dir_and_keeps_the_previous(tmp_path):
    root = str(tmp_path / "checkpoints")
    rank0, rank1 = CheckpointStore(root, keep=1, rank=0), CheckpointStore(root, keep=1, rank=1)
    rank0.save(4, *_payloads(4, 5000), {"world_size": 2})
    before = _snapshot(rank0.step_dir(4))

    def disk_full(path):
        with open(path, "wb") as f:
            f.write(b"half a model")
        raise OSError(errno.ENOSPC, "No space left on device")   # as write() raises it: no file name

    shared, per_rank = _payloads(5, 5000)
    p1 = rank1.begin(5, {}, {"rng-rank1.pt": b"rng"})
    p0 = rank0.begin(5, {**shared, "model.safetensors": disk_full}, per_rank)
    assert os.path.isdir(rank0.tmp_dir(5))
    with pytest.raises(CheckpointError) as e1:
        p1.commit(lambda failed: True)        # the all-reduce: rank 0 failed
    with pytest.raises(CheckpointError) as e0:
        p0.commit(lambda failed: True)
    assert str(e0.value) == (f"checkpoint step 5 not written: rank 0: No space left on device "
                             f"({rank0.tmp_dir(5)}/model.safetensors); the checkpoints already in {root} are untouched")
    assert "another rank could not write its files" in str(e1.value)
    assert not os.path.exists(rank0.tmp_dir(5)) and not os.path.exists(rank0.step_dir(5))
    assert rank0.list_steps() == [4] and _snapshot(rank0.step_dir(4)) == before and verify(rank0.step_dir(4))[0]


def test_a_full_disk_under_the_manifest_removes_the_temp_dir_and_keeps_the_previous(tmp_path, monkeypatch):
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=1)
    store.save(4, *_payloads(4, 5000), {"world_size": 1})
    before = _snapshot(store.step_dir(4))
    real = ckpt.write_file

    def full_at_manifest(path, payload):
        if path.endswith(ckpt.MANIFEST):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(path, payload)

    monkeypatch.setattr(ckpt, "write_file", full_at_manifest)
    agreed = []
    with pytest.raises(CheckpointError, match=r"^checkpoint step 5 not written: No space left on device \(.*"
                                              r"\.tmp-step-5/manifest\.json\)"):
        store.save(5, *_payloads(5, 5000), {"world_size": 1}, agree_failed=lambda f: agreed.append(f) or f)
    assert agreed == [False, True]           # the commit agreed, then every rank learned of the publish failure
    assert not os.path.exists(store.tmp_dir(5)) and store.list_steps() == [4]
    assert _snapshot(store.step_dir(4)) == before


def test_a_resave_whose_rename_fails_puts_the_old_checkpoint_back(tmp_path, monkeypatch):
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=2)
    store.save(4, *_payloads(4, 5000), {"world_size": 1})
    before = _snapshot(store.step_dir(4))
    real = os.rename

    def no_room_for_the_new(src, dst):
        if src == store.tmp_dir(4):
            raise OSError(errno.ENOSPC, "No space left on device", src)
        real(src, dst)

    monkeypatch.setattr(ckpt.os, "rename", no_room_for_the_new)
    with pytest.raises(CheckpointError, match="step 4 not written"):
        store.save(4, *_payloads(44, 5000), {"world_size": 1})   # a re-save of step 4 after a resume
    monkeypatch.undo()
    assert _snapshot(store.step_dir(4)) == before and not os.path.exists(store.tmp_dir(4))
    assert [n for n in os.listdir(store.root) if n.startswith(".old-step-")] == []


# A driver for train_entry whose checkpoint writes hit a full disk in one file ($FAIL_IN).
FULL_DISK_MAIN = """
import errno, os, sys
from hpclaunch.train_entry import checkpoint as ckpt
real = ckpt.write_unsynced
def write_unsynced(path, payload):
    if path.endswith(os.environ["FAIL_IN"]):
        with open(path, "wb") as f:
            f.write(b"half a file")
        raise OSError(errno.ENOSPC, "No space left on device")
    real(path, payload)
ckpt.write_unsynced = write_unsynced
from hpclaunch.train_entry.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("mode", ["beside-training", "sync"])
def test_training_stops_in_one_line_when_a_checkpoint_hits_a_full_disk(tmp_path, digits_csv, mode):
    rd = str(tmp_path / "run")
    extra = ["--sync-checkpoints"] if mode == "sync" else []
    proc = _train(digits_csv, rd, "--checkpoint-every", 5, "--keep-checkpoints", 1, *extra, main=FULL_DISK_MAIN,
                  env=rank_env(FAIL_IN=os.path.join(".tmp-step-10", "trainer.pt")))
    ck = os.path.join(rd, "checkpoints")
    _one_error_line(proc, 1, f"checkpoint step 10 not written: rank 0: No space left on device "
                             f"({ck}/.tmp-step-10/trainer.pt); the checkpoints already in {ck} are untouched")
    assert _steps(rd) == [5] and verify(os.path.join(ck, "step-5"))[0]


# --- the same on a real full file system (a tiny tmpfs; skipped where mounting is not allowed) ---

@pytest.fixture
def tiny_disk():
    mounted = []

    def mount(path, size):
        os.makedirs(path, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); the tests above fake the full disk")
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in mounted:
            subprocess.run(["umount", path], check=True)


def test_a_real_full_disk_keeps_the_previous_checkpoint(tmp_path, tiny_disk):
    store = CheckpointStore(tiny_disk(str(tmp_path / "checkpoints"), "64k"), keep=1)
    store.save(1, *_payloads(1, 8000), {"world_size": 1})
    before = _snapshot(store.step_dir(1))
    with pytest.raises(CheckpointError, match=r"step 2 not written: rank 0: No space left on device \(.*\.tmp-step-2/"):
        store.save(2, *_payloads(2, 60000), {"world_size": 1})
    assert not os.path.exists(store.tmp_dir(2)) and store.list_steps() == [1]
    assert _snapshot(store.step_dir(1)) == before


def test_safetensors_on_a_real_full_disk_raises_an_os_error_naming_the_file(tmp_path, tiny_disk):
    import torch

    path = os.path.join(tiny_disk(str(tmp_path / "d"), "64k"), "model.safetensors")
    with pytest.raises(OSError) as exc:
        ckpt.save_weights_payload(torch.nn.Linear(200, 200))(path)   # 160 kB of weights
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == path


def test_training_on_a_real_full_disk_stops_in_one_line(tmp_path, digits_csv, tiny_disk):
    rd = str(tmp_path / "run")
    ck = tiny_disk(os.path.join(rd, "checkpoints"), "96k")   # one checkpoint (~60 kB) fits, two do not
    proc = _train(digits_csv, rd, "--hidden", 32, "--checkpoint-every", 3, "--keep-checkpoints", 1)
    _one_error_line(proc, 1, "not written: rank 0: No space left on device", f"({ck}/.tmp-step-")
    steps = _steps(rd)
    assert steps and all(verify(os.path.join(ck, f"step-{s}"))[0] for s in steps), steps
