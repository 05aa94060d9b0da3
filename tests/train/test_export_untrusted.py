"""`hpclaunch export` on a run directory from someone else (issue 44): it imports no module a
manifest names (the built-in MLP is built from train_entry's own registry; anything else only
when the user names it with --model), and a malformed weights file or manifest is one line, exit
2, never a traceback, never a large allocation."""
import hashlib
import json
import os
import struct

import pytest
from hlcli import hl
from test_checkpoint_untrusted import INFO, edit_manifest, mlp_checkpoint

from hpclaunch.train_entry.checkpoint import CheckpointStore

PLANTED = """
open({mark!r}, "w").write("imported")


def make(in_features, num_classes):
    from hpclaunch.train_entry.model import MLP
    return MLP(in_features, num_classes, (4,), 0.0)
"""


def _rehash(ckdir, name):
    """Rewrite the manifest's entry of ``name``, as anyone who can write the run directory can."""
    data = open(os.path.join(ckdir, name), "rb").read()
    edit_manifest(ckdir, lambda m: m["files"].__setitem__(name, {"sha256": hashlib.sha256(data).hexdigest(),
                                                                "size": len(data)}))


def _one_line_refusal(proc):
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


@pytest.fixture(scope="module")
def onnx_ready():
    from hpclaunch.train_entry.export import missing_packages

    import hpclaunch_cluster_fixture  # loaded by tests/conftest.py: skips here, fails in CI

    missing = missing_packages()
    hpclaunch_cluster_fixture.require_or_skip(f"{', '.join(missing)} not installed (hpclaunch[export])" if missing
                                              else None, "tests/train/test_export_untrusted.py")


def test_export_imports_no_module_the_manifest_names(tmp_path, onnx_ready):
    rd, here = tmp_path / "run", tmp_path / "here"
    here.mkdir()
    store = CheckpointStore(str(rd / "checkpoints"))
    mlp_checkpoint(store, 1, {**INFO, "spec": "planted_mod:make"})
    marks = {where: tmp_path / f"imported-from-{where.name}" for where in (here, rd)}
    for where, mark in marks.items():        # a module of that name in the current folder and in the run's
        (where / "planted_mod.py").write_text(PLANTED.format(mark=str(mark)))
    for cwd in (here, rd):
        err = _one_line_refusal(hl("export", str(rd), cwd=str(cwd), check=False, timeout=120))
        assert "the model is made by planted_mod:make" in err and "--model planted_mod:make" in err, err
        assert not any(m.exists() for m in marks.values()), "export imported a module a manifest names"
    # os:abort, a callable of the standard library: not called (before: export died of SIGABRT)
    edit_manifest(store.step_dir(1), lambda m: m["model"].__setitem__("spec", "os:abort"))
    err = _one_line_refusal(hl("export", str(rd), cwd=str(here), check=False, timeout=120))
    assert "the model is made by os:abort" in err, err
    # named by the user, it is imported (from the current folder, as under python -m) and exported
    proc = hl("export", str(rd), "--model", "planted_mod:make", cwd=str(here), timeout=300)
    assert marks[here].exists() and not marks[rd].exists()
    assert "exported checkpoints/step-1 (step 1)" in proc.stdout, proc.stdout
    err = _one_line_refusal(hl("export", str(rd), "--model", "planted_mod;make", cwd=str(here), check=False))
    assert "--model 'planted_mod;make': expected module:factory" in err


def _header(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _with_header(header, body):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _too_large(raw):
    return struct.pack("<Q", 1 << 40) + raw[8:]


def _past_the_end(raw):
    header, body = _header(raw)
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [0, 10 ** 12]
    return _with_header(header, body)


def _absurd_shape(raw):
    header, body = _header(raw)
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [1 << 40, 1 << 40]
    return _with_header(header, body)


def _nested_header(raw):
    return _with_header(b"[" * 50_000 + b"]" * 50_000, _header(raw)[1])


WEIGHTS = {"too-large": _too_large, "past-the-end": _past_the_end, "absurd-shape": _absurd_shape,
           "nested-header": _nested_header}


@pytest.mark.parametrize("kind", sorted(WEIGHTS))
def test_a_malformed_safetensors_header_is_one_line(tmp_path, kind):
    from hpclaunch.train_entry.checkpoint import UnsafeCheckpoint, load_weights
    from hpclaunch.train_entry.model import MLP

    rd = tmp_path / "run"
    store = CheckpointStore(str(rd / "checkpoints"))
    ckdir = mlp_checkpoint(store, 3)
    weights = os.path.join(ckdir, "model.safetensors")
    with open(weights, "rb") as f:
        raw = f.read()
    with open(weights, "wb") as f:
        f.write(WEIGHTS[kind](raw))
    _rehash(ckdir, "model.safetensors")
    err = _one_line_refusal(hl("export", str(rd), "--step", "3", check=False, timeout=120))
    assert f"{weights}: not a usable safetensors file (" in err, err
    # resume's loader: a CheckpointError (named, and the previous checkpoint tried), not the library's own
    with pytest.raises(UnsafeCheckpoint, match="not a usable safetensors file"):
        load_weights(MLP(8, 3, (4,), 0.0), weights)


def test_a_deeply_nested_or_huge_manifest_is_one_line(tmp_path):
    rd = tmp_path / "run"
    store = CheckpointStore(str(rd / "checkpoints"))
    mlp_checkpoint(store, 1)
    deep = mlp_checkpoint(store, 2)
    with open(os.path.join(deep, "manifest.json"), "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)       # before: RecursionError out of json.load
    err = _one_line_refusal(hl("export", str(rd), "--step", "2", check=False, timeout=60))
    assert "does not verify (unreadable manifest (JSON nested more than 32 deep))" in err, err
    with open(os.path.join(deep, "manifest.json"), "wb") as f:
        f.write(b'{"schema": "' + b"x" * (17 << 20) + b'"}')
    err = _one_line_refusal(hl("export", str(rd), "--step", "2", check=False, timeout=60))
    assert "does not verify (unreadable manifest (over 16 MiB))" in err, err


@pytest.mark.parametrize("fields,why", [
    ({"in_features": 2 ** 31 - 1, "feature_names": None},
     "the weights do not fit the model (net.0.weight is [4, 8] in the checkpoint but [4, 2147483647] in the manifest's "
     "model)"),
    ({"hidden": "2147483647"}, "the weights do not fit the model (net.0.bias is [4] in the checkpoint but "
                               "[2147483647] in the manifest's model)"),
    ({"hidden": "2147483647,2147483647"}, "the manifest's model is too large to build (Storage size calculation "
                                          "overflowed"),
    ({"in_features": 2 ** 40}, "model.in_features is not a whole number 1..2147483648"),
    ({"hidden": "1," * 1000}, "model.hidden is not at most 256 comma-separated widths"),
    ({"classes": "abc"}, "model.classes is not a list of 3 names (num_classes)"),
    ({"dropout": 1e308}, "model.dropout is not a number in [0, 1)"),
])
def test_absurd_model_shapes_in_a_manifest_take_no_memory(tmp_path, fields, why):
    """The MLP is checked against the weights' header on the meta device before it is built."""
    rd = tmp_path / "run"
    store = CheckpointStore(str(rd / "checkpoints"))
    mlp_checkpoint(store, 1, {**INFO, **fields})
    err = _one_line_refusal(hl("export", str(rd), check=False, timeout=120))
    assert why in err, err


def test_export_does_not_write_through_a_link_in_the_run_directory(tmp_path, onnx_ready):
    rd, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.json").write_text("mine\n")
    mlp_checkpoint(CheckpointStore(str(rd / "checkpoints")), 1)
    os.symlink(elsewhere, rd / "exports")          # planted by whoever can write the run directory
    err = _one_line_refusal(hl("export", str(rd), check=False, timeout=300))
    assert f"{rd / 'exports'}: a symbolic link, not the run's exports folder" in err and "-o DIR" in err, err
    assert sorted(os.listdir(elsewhere)) == ["model.json"] and (elsewhere / "model.json").read_text() == "mine\n"


def test_the_legacy_model_description_reads_no_fifo_and_no_deep_line(tmp_path):
    """A manifest without `model` (written before it had one): export reads the run's configuration
    from metrics/rank0.jsonl and the shape from its data file, both named by the run directory."""
    import subprocess

    rd = tmp_path / "run"
    store = CheckpointStore(str(rd / "checkpoints"))
    mlp_checkpoint(store, 1)
    edit_manifest(store.step_dir(1), lambda m: m.pop("model"))
    os.mkfifo(tmp_path / "data.csv")                   # before: open() blocked until the time limit
    (rd / "metrics").mkdir()
    header = {"kind": "header", "config": {"data": str(tmp_path / "data.csv"), "hidden": "4", "dropout": 0.0}}
    (rd / "metrics" / "rank0.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(header) + "\n")
    try:
        proc = hl("export", str(rd), check=False, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("export hung on a FIFO named as the run's data") from None
    err = _one_line_refusal(proc)
    assert f"the model's shape comes from its data '{tmp_path / 'data.csv'}', which cannot be read" in err, err
    assert "is not a regular file" in err, err
