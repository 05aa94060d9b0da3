"""The built-in model family: the MLP and the transformer sized by --size (issue 49)."""
import json
import os

import pytest
from conftest import PY, rank_env, run

from hpclaunch.train_entry.manifest import BadCheckpoint, model_info


def test_transformer_sizes_grow_as_documented():
    """docs/train-entry.md quotes these counts; each size is ~8x the previous one's parameters."""
    from hpclaunch.train_entry.model import TRANSFORMER_SIZES, build_model

    counts = {s: sum(p.numel() for p in build_model("transformer", 64, 10, size=s).parameters())
              for s in TRANSFORMER_SIZES if s != "xl"}
    assert counts == {"tiny": 29930, "small": 208970, "base": 4774666, "large": 37900810}


def test_transformer_takes_any_batch_including_an_empty_one():
    """A rank with no validation rows still runs the forward (FSDP2 gathers in it: every rank must)."""
    import torch

    from hpclaunch.train_entry.model import build_model

    model = build_model("transformer", 7, 3, size="tiny").eval()
    assert model(torch.randn(5, 7)).shape == (5, 3) and model(torch.randn(0, 7)).shape == (0, 3)


def test_model_info_accepts_the_builtin_names_and_sizes_only():
    base = {"hidden": "", "in_features": 4, "num_classes": 2}
    assert model_info({**base, "spec": "transformer", "size": "tiny"})["size"] == "tiny"
    assert model_info({**base, "spec": "mlp"})["spec"] == "mlp"
    with pytest.raises(BadCheckpoint, match="model.size"):
        model_info({**base, "spec": "transformer", "size": "huge"})
    with pytest.raises(BadCheckpoint, match="model.spec"):
        model_info({**base, "spec": "transformer; rm"})


def test_transformer_trains_and_exports(tmp_path, digits_csv, require):
    from hpclaunch.train_entry.export import missing_packages

    require(", ".join(missing_packages()) or None, "the transformer's ONNX export")
    r = run([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", tmp_path, "--epochs", 2,
             "--model", "transformer", "--size", "tiny", "--dropout", 0, "--export", "onnx", "--no-tensorboard",
             "--no-mlflow"], env=rank_env(), timeout=240)
    assert r.returncode == 0, r.stdout[-3000:]
    desc = json.load(open(os.path.join(tmp_path, "exports", "model.json")))
    assert desc["check"]["max_abs_diff"] < 1e-4 and desc["val_accuracy"] > 0.5, desc
    manifest = json.load(open(os.path.join(tmp_path, "checkpoints", f"step-{desc['step']}", "manifest.json")))
    assert (manifest["model"]["spec"], manifest["model"]["size"]) == ("transformer", "tiny")
