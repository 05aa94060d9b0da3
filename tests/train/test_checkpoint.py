"""Checkpoint validity: partial / corrupt checkpoints are never chosen, even after kill -9."""
import errno
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from hpclaunch.train_entry.checkpoint import CheckpointError, CheckpointStore, verify

sys.path.insert(0, os.path.dirname(__file__))
from _ckpt_writer import payload  # noqa: E402

WRITER = os.path.join(os.path.dirname(__file__), "_ckpt_writer.py")


def _save(store, step):
    return store.save(step, {"model.safetensors": payload(step, "model.safetensors"),
                             "trainer.pt": payload(step, "trainer.pt")},
                      {"rng-rank0.pt": payload(step, "rng-rank0.pt")}, {"epoch": 0, "world_size": 1})


def test_layout_manifest_and_keep(tmp_path):
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=2)
    for s in (1, 2, 3):
        _save(store, s)
    assert store.list_steps() == [3, 2]
    path, manifest, skipped = store.latest_valid()
    assert path.endswith("step-3") and skipped == []
    assert set(manifest["files"]) == {"model.safetensors", "trainer.pt", "rng-rank0.pt"}
    assert manifest["schema"] == "hpclaunch.checkpoint/1" and manifest["step"] == 3


def _files(step):
    return ({"model.safetensors": payload(step, "model.safetensors"), "trainer.pt": payload(step, "trainer.pt")},
            {"rng-rank0.pt": payload(step, "rng-rank0.pt")})


def test_a_save_in_flight_is_chosen_only_once_committed_and_published(tmp_path):
    store = CheckpointStore(str(tmp_path / "checkpoints"), keep=3)
    _save(store, 1)
    pending = store.begin(2, *_files(2), {"epoch": 0, "world_size": 1})
    # the files are written, but until the commit a resume must still pick step 1
    assert sorted(os.listdir(store.tmp_dir(2))) == ["model.safetensors", "rng-rank0.pt", "trainer.pt"]
    assert store.latest_valid()[0] == store.step_dir(1)
    agreed = []
    pending.commit(lambda failed: agreed.append(failed) or failed)
    pending.wait()
    assert agreed == [False]
    path, manifest, skipped = store.latest_valid()
    assert path == store.step_dir(2) == pending.final and skipped == []
    assert not os.path.exists(store.tmp_dir(2))
    with open(os.path.join(path, "trainer.pt"), "rb") as f:
        assert f.read() == payload(2, "trainer.pt")


def test_a_failed_write_fails_every_rank_together_and_publishes_nothing(tmp_path):
    root = str(tmp_path / "checkpoints")
    rank0, rank1 = CheckpointStore(root, keep=3, rank=0), CheckpointStore(root, keep=3, rank=1)

    def disk_full(path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    shared, per_rank = _files(5)
    p0 = rank0.begin(5, {**shared, "model.safetensors": disk_full}, per_rank)  # does not raise here...
    p1 = rank1.begin(5, {}, {"rng-rank1.pt": payload(5, "rng-rank1.pt")})
    flags = []
    # rank 1 first: a real all-reduce returns on rank 0 only once rank 1 has joined its writes too,
    # and rank 0 then removes the temp dir
    with pytest.raises(CheckpointError, match="another rank could not write"):
        p1.commit(lambda failed: flags.append(failed) or True)   # the all-reduce told rank 1
    with pytest.raises(CheckpointError, match=r"step 5 .*rank 0: .*No space left"):
        p0.commit(lambda failed: flags.append(failed) or True)   # ...but at the agreement
    assert flags == [False, True]
    assert rank0.latest_valid()[0] is None and not os.path.exists(rank0.step_dir(5))


def test_invalid_checkpoints_are_skipped_with_reasons(tmp_path):
    root = tmp_path / "checkpoints"
    store = CheckpointStore(str(root), keep=10)
    for s in (1, 2, 3, 4, 5):
        _save(store, s)
    os.remove(root / "step-5" / "manifest.json")                    # partial: no manifest
    with open(root / "step-4" / "trainer.pt", "r+b") as f:          # bit flip
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    with open(root / "step-3" / "model.safetensors", "r+b") as f:   # truncated
        f.truncate(10)
    (root / "step-2" / "manifest.json").write_text("{not json")     # unreadable manifest
    os.makedirs(root / ".tmp-step-9")                               # an interrupted write
    (root / "step-7").mkdir()                                       # empty directory
    path, manifest, skipped = store.latest_valid()
    assert path == str(root / "step-1")
    reasons = dict((os.path.basename(p), r) for p, r in skipped)
    assert reasons["step-7"].startswith("no manifest") and reasons["step-5"].startswith("no manifest")
    assert "sha256 mismatch" in reasons["step-4"] and "size mismatch" in reasons["step-3"]
    assert "unreadable manifest" in reasons["step-2"]
    store.clean_temp()
    assert not (root / ".tmp-step-9").exists()


def test_kill_9_during_checkpoint_writes_never_yields_a_partial_checkpoint(tmp_path):
    """>= 50 times: start a writer, SIGKILL it at a random moment, check the resume choice."""
    root = str(tmp_path / "checkpoints")
    rng = random.Random(1234)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    committed, kills, chosen_steps, partial_seen = 0, 0, [], 0
    for i in range(60):
        proc = subprocess.Popen([sys.executable, WRITER, root, str(committed + 1000 * i)],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout.readline().strip() == "ready"     # imports done: the kill lands in the write loop
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        reported = [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]
        if reported:
            committed = max(reported)
        if any(n.startswith(".tmp-step-") for n in os.listdir(root)):
            partial_seen += 1            # the kill landed inside a write
        store = CheckpointStore(root, keep=3)
        path, manifest, skipped = store.latest_valid()
        if committed == 0 and path is None:
            continue
        assert path is not None, f"iteration {i}: no valid checkpoint although step {committed} was committed"
        step = manifest["step"]
        # the newest reported commit (or one the writer renamed but did not get to print) is chosen
        assert step >= committed, (i, step, committed)
        for name in ("model.safetensors", "trainer.pt", "rng-rank0.pt"):   # independent oracle: exact bytes
            with open(os.path.join(path, name), "rb") as f:
                assert f.read() == payload(step, name), (i, step, name)
        assert verify(path)[0]
        chosen_steps.append(step)
        committed = max(committed, step)
    assert kills >= 50
    assert len(set(chosen_steps)) > 10, "kills should land at many different moments"
    assert partial_seen >= 20, f"only {partial_seen} kills interrupted a write"
