"""A run directory from someone else (issue 44): a colleague's on a shared filesystem may list
FIFOs, devices, links and paths outside the checkpoint folder in its manifests, or hold a valid
checkpoint under another step's name. Export and resume refuse each within a second in one line
(resume falls back to the previous valid checkpoint), and prune never deletes the run's own
checkpoints for it. Calls that hung before run in a child with a timeout, so a hang fails."""
import hashlib
import json
import os
import shutil
import subprocess
import textwrap

import pytest
from conftest import PY, rank_env, run
from hlcli import hl

from hpclaunch.train_entry.checkpoint import CheckpointStore, save_weights_payload

EMPTY_SHA = hashlib.sha256(b"").hexdigest()
INFO = {"spec": None, "hidden": "4", "dropout": 0.0, "in_features": 8, "num_classes": 3,
        "feature_names": [f"f{i}" for i in range(8)], "classes": [0, 1, 2], "data": "x.csv",
        "label_column": "label", "precision": "fp32"}


def mlp_checkpoint(store, step, info=INFO):
    """A checkpoint of the built-in MLP 8-4-3 (INFO's shape), as the trainer writes one, whose
    manifest says ``info``."""
    import torch

    from hpclaunch.train_entry.model import MLP

    torch.manual_seed(step)
    model = MLP(8, 3, (4,), 0.0)
    return store.save(step, {"model.safetensors": save_weights_payload(model), "trainer.pt": b"t" * 100},
                      {"rng-rank0.pt": b"r" * 50}, {"epoch": 0, "batch_in_epoch": 0, "world_size": 1, "model": info})


def edit_manifest(ckdir, edit):
    path = os.path.join(ckdir, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    edit(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def relist(ckdir, name, path_for_hash=None):
    """List ``name`` in the manifest with the size and sha256 of ``path_for_hash`` (default: empty)."""
    data = open(path_for_hash, "rb").read() if path_for_hash else b""
    edit_manifest(ckdir, lambda m: m["files"].__setitem__(name, {"sha256": hashlib.sha256(data).hexdigest(),
                                                                "size": len(data)}))


def plant(kind, ckdir, outside):
    """Make the checkpoint folder ``ckdir`` list something that is not one of its regular files."""
    if kind == "fifo":                      # a FIFO under a file's name, size 0: open() blocked forever
        os.remove(os.path.join(ckdir, "rng-rank0.pt"))
        os.mkfifo(os.path.join(ckdir, "rng-rank0.pt"))
        relist(ckdir, "rng-rank0.pt")
    elif kind == "dev-zero":                # an absolute path: os.path.join(folder, "/dev/zero") is /dev/zero
        relist(ckdir, "/dev/zero")
    elif kind == "link-to-device":          # the weights symlinked to a device, size 0: read forever
        os.remove(os.path.join(ckdir, "model.safetensors"))
        os.symlink("/dev/zero", os.path.join(ckdir, "model.safetensors"))
        relist(ckdir, "model.safetensors")
    elif kind == "escape":                  # a regular file outside the folder, with its right hash
        relist(ckdir, os.path.join("..", "..", "..", os.path.basename(outside)), outside)  # run/checkpoints/step-N
    elif kind == "link-outside":            # a link to a regular file outside, with its right hash
        os.remove(os.path.join(ckdir, "rng-rank0.pt"))
        os.symlink(outside, os.path.join(ckdir, "rng-rank0.pt"))
        relist(ckdir, "rng-rank0.pt", outside)
    else:
        raise AssertionError(kind)


KINDS = ["fifo", "dev-zero", "link-to-device", "escape", "link-outside"]
WHY = {"fifo": "rng-rank0.pt is a FIFO, not a regular file", "dev-zero": "'/dev/zero', not a file name inside",
       "link-to-device": "model.safetensors is a symbolic link, not a regular file",
       "escape": "not a file name inside the checkpoint folder",
       "link-outside": "rng-rank0.pt is a symbolic link, not a regular file"}


def in_child(code, timeout=30):
    """Run ``code`` in a fresh Python (what hung before must fail the test, not hang it); the
    JSON it prints last."""
    try:
        proc = subprocess.run([PY, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung for {timeout} s:\n{code}") from None
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside.bin"
    path.write_bytes(b"someone else's file\n")
    return str(path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_manifest_naming_a_non_file_is_refused_within_a_second(tmp_path, outside, kind):
    rd = tmp_path / "run"
    store = CheckpointStore(str(rd / "checkpoints"), keep=5)
    mlp_checkpoint(store, 1)
    plant(kind, mlp_checkpoint(store, 2), outside)
    # resume's choice (valid_checkpoints) and export's (choose_checkpoint): the one before, at once
    got = in_child(f"""
        import json, time
        from hpclaunch.train_entry.checkpoint import CheckpointStore
        from hpclaunch.train_entry.export import ExportError, choose_checkpoint
        t = time.monotonic()
        found, skipped = CheckpointStore({str(rd / 'checkpoints')!r}, rank=-1).valid_checkpoints()
        resume_s = time.monotonic() - t
        t = time.monotonic()
        try:
            choose_checkpoint({str(rd)!r}, 2)
            refusal = None
        except ExportError as exc:
            refusal = str(exc)
        export_s = time.monotonic() - t
        print(json.dumps({{"found": [p for p, _ in found], "skipped": skipped, "resume_s": resume_s,
                          "refusal": refusal, "export_s": export_s, "newest": choose_checkpoint({str(rd)!r})[0]}}))
    """)
    assert got["found"] == [store.step_dir(1)] and got["newest"] == store.step_dir(1), got
    assert len(got["skipped"]) == 1 and got["skipped"][0][0] == store.step_dir(2)
    assert WHY[kind] in got["skipped"][0][1], got["skipped"]
    assert got["resume_s"] < 1 and got["export_s"] < 1, got
    assert got["refusal"] and WHY[kind] in got["refusal"] and "\n" not in got["refusal"], got
    # the command: one line, exit 2, naming the folder and why
    proc = hl("export", str(rd), "--step", "2", check=False, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{store.step_dir(2)}: does not verify (" in proc.stderr and WHY[kind] in proc.stderr, proc.stderr
    assert proc.stderr.endswith("\u2014 export another step (1)\n"), proc.stderr
    assert os.path.exists(outside) and not (rd / "exports").exists()


def test_resume_skips_each_non_file_in_one_line_and_falls_back(tmp_path, digits_csv, outside):
    rd = str(tmp_path / "run")
    args = [PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", rd, "--epochs", "2",
            "--batch-size", "64", "--checkpoint-every", "5", "--keep-checkpoints", "8", "--no-tensorboard",
            "--no-mlflow"]
    first = run(args + ["--stop-after-step", "30"], env=rank_env(), timeout=180)
    assert first.returncode == 75, first.stdout[-2000:]
    ck = os.path.join(rd, "checkpoints")
    steps = sorted(int(n.split("-")[1]) for n in os.listdir(ck))
    assert steps == [5, 10, 15, 20, 22, 25, 30], steps           # 22: the first epoch's end
    hostile = dict(zip([30, 25, 22, 20, 15], KINDS))
    for step, kind in hostile.items():
        plant(kind, os.path.join(ck, f"step-{step}"), outside)
    try:
        again = run(args + ["--stop-after-step", "12"], env=rank_env(), timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError("resume hung on a manifest naming a non-file") from None
    assert again.returncode == 75 and "Traceback" not in again.stdout, again.stdout[-3000:]
    for step, kind in hostile.items():
        lines = [ln for ln in again.stdout.splitlines() if f"checkpoint {ck}/step-{step} skipped:" in ln]
        assert len(lines) == 1 and WHY[kind] in lines[0], (kind, again.stdout[-3000:])
    assert f"resuming from {ck}/step-10 " in again.stdout, again.stdout[-3000:]
    assert os.path.exists(outside)


def test_a_checkpoint_under_another_steps_name_is_ignored_and_never_pruned(tmp_path):
    root = tmp_path / "checkpoints"
    store = CheckpointStore(str(root), keep=2)
    mlp_checkpoint(store, 5)
    mlp_checkpoint(store, 6)
    shutil.copytree(store.step_dir(6), store.step_dir(100))       # valid content of step 6, named step-100
    path, manifest, skipped = store.latest_valid()
    assert path == store.step_dir(6) and manifest["step"] == 6, (path, skipped)
    assert skipped == [(store.step_dir(100), "its manifest is of step 6, not 100 (a checkpoint copied in under "
                                             "another name?)")]
    found, skipped = store.valid_checkpoints()
    assert [p for p, _ in found] == [store.step_dir(6), store.step_dir(5)]
    assert skipped[0][0] == store.step_dir(100) and "ignored, never pruned" in skipped[0][1]
    mlp_checkpoint(store, 7)
    mlp_checkpoint(store, 8)
    # keep 2: the run's own 7 and 8 (before: step-100 took a place and 7 was deleted); 100 is left alone
    assert store.list_steps() == [100, 8, 7], store.list_steps()


def test_a_misnamed_checkpoint_is_not_resumed_and_the_runs_own_are_kept(tmp_path, digits_csv):
    rd = str(tmp_path / "run")
    args = [PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", rd, "--epochs", "1",
            "--batch-size", "64", "--checkpoint-every", "5", "--keep-checkpoints", "2", "--no-tensorboard",
            "--no-mlflow"]
    first = run(args + ["--stop-after-step", "10"], env=rank_env(), timeout=180)
    assert first.returncode == 75, first.stdout[-2000:]
    ck = os.path.join(rd, "checkpoints")
    shutil.copytree(os.path.join(ck, "step-5"), os.path.join(ck, "step-50"))
    again = run(args + ["--stop-after-step", "15"], env=rank_env(), timeout=180)
    assert again.returncode == 75 and "Traceback" not in again.stdout, again.stdout[-3000:]
    assert f"resuming from {ck}/step-10 " in again.stdout, again.stdout[-3000:]
    assert f"checkpoint {ck}/step-50 skipped: its manifest is of step 5, not 50" in again.stdout
    assert sorted(os.listdir(ck)) == ["step-10", "step-15", "step-50"], os.listdir(ck)
    # a third attempt (step-5 is pruned now; before, this one crashed looking for it)
    third = run(args + ["--stop-after-step", "17"], env=rank_env(), timeout=180)
    assert third.returncode == 75 and "Traceback" not in third.stdout, third.stdout[-3000:]
    assert f"resuming from {ck}/step-15 " in third.stdout, third.stdout[-3000:]


def test_no_resume_leaves_folders_that_are_not_checkpoint_names(tmp_path):
    root = tmp_path / "checkpoints"
    store = CheckpointStore(str(root), keep=3)
    mlp_checkpoint(store, 7)
    shutil.copytree(store.step_dir(7), root / "step-007")           # zero-padded: not the writer's name
    os.symlink(store.step_dir(7), root / "step-9")                  # a link: not a folder of this run
    assert store.list_steps() == [7]
    found, skipped = store.valid_checkpoints()
    assert [p for p, _ in found] == [store.step_dir(7)]
    assert sorted(os.path.basename(p) for p, _ in skipped) == ["step-007", "step-9"], skipped
    aside = store.start_new_lineage()                               # before: FileNotFoundError on step-7 twice
    assert os.listdir(aside) == ["step-7"]
    assert sorted(os.listdir(root)) == sorted(["step-007", "step-9", os.path.basename(aside)])


def test_a_garbled_trainer_pt_is_an_unsafe_checkpoint(tmp_path):
    """Resume loads trainer.pt with weights_only; garbled bytes (anyone can rewrite the manifest's
    hash) are an UnsafeCheckpoint, which resume names before trying the previous checkpoint, in
    whatever way the unpickler fails (before: an IndexError escaped as a traceback)."""
    import random

    import torch

    from hpclaunch.train_entry.checkpoint import UnsafeCheckpoint, torch_bytes, torch_load

    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    raw = torch_bytes({"optimizer": opt.state_dict(), "state": {"step": 1}})
    rng, path, refused = random.Random(1), tmp_path / "trainer.pt", 0
    for _ in range(400):
        data = bytearray(raw)
        op = rng.randrange(3)
        if op == 0:
            data = data[:rng.randrange(len(data))]
        elif op == 1:
            for _ in range(rng.randint(1, 5)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            pos = rng.randrange(len(data))
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
        path.write_bytes(bytes(data))
        try:
            torch_load(str(path))
        except UnsafeCheckpoint as exc:
            assert "not loadable as plain data" in str(exc) and str(exc).isprintable(), exc
            refused += 1
    assert refused > 300, refused
