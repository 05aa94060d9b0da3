"""Issue 19, deploying what was trained: --export onnx / train.export at the end of a run, and
`hpclaunch export` afterwards. The oracle is the torch model rebuilt here from the checkpoint's
safetensors, run on the validation split, against ONNX Runtime on CPU running the exported file."""
import csv
import json
import os
import sys

import numpy as np
import pytest
from conftest import PY, rank_env, run
from hlcli import hl

ROWS = 1797            # digits
STEPS_PER_EPOCH = 11   # 1437 training rows, 2 ranks, batch 64: 718 // 64
EPOCHS = 3


@pytest.fixture(scope="module")
def onnx_stack():
    from hpclaunch.train_entry.export import missing_packages

    missing = missing_packages()
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        missing.append("onnxruntime")
    import hpclaunch_cluster_fixture  # loaded by tests/conftest.py: skips here, fails in CI

    hpclaunch_cluster_fixture.require_or_skip(f"{', '.join(missing)} not installed (hpclaunch[export])" if missing else None,
                                    "tests/train/test_export.py")


@pytest.fixture(scope="module")
def exported_run(tmp_path_factory, digits_csv, onnx_stack):
    """A 2-rank torchrun job through the local backend, bf16 autocast, train.export: [onnx] in the job
    file, 5 checkpoints kept (3 epochs: 3 checkpoints, all kept)."""
    tmp = tmp_path_factory.mktemp("export")
    job = tmp / "job.yaml"
    job.write_text(f"""
name: onnx-export
launcher: torchrun
command: [{PY}, -m, hpclaunch.train_entry, --data, {digits_csv}, --epochs, "{EPOCHS}", --no-tensorboard, --no-mlflow]
resources: {{nodes: 1, tasks_per_node: 2, time: "00:10:00"}}
monitor: {{interval: 0}}
env: {{OMP_NUM_THREADS: "1"}}
train: {{export: [onnx], keep_checkpoints: 5, precision: bf16}}
""")
    env = {**os.environ, "HPCLAUNCH_HOME": str(tmp / "home")}
    hl("submit", str(job), "--backend", "local", "--wait", cwd=str(tmp), env=env, timeout=300)
    st = json.loads(hl("status", "onnx-export", "--json", cwd="/", env=env).stdout)
    assert st["state"] == "COMPLETED", st
    return st["run_dir"]


def _validation(csv_path):
    """(features, label indices, feature names, classes) of the validation split, from the CSV."""
    from hpclaunch.train_entry.data import split

    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], np.array(rows[1:], dtype=np.float64)
    li = header.index("label")
    x, labels = np.delete(body, li, axis=1).astype(np.float32), body[:, li].astype(np.int64)
    classes = sorted(set(labels.tolist()))
    _, va = split(len(labels), 0.2, 0)      # the trainer's seeded split (seed 0, 20 %)
    return x[va], np.searchsorted(classes, labels[va]), [h for h in header if h != "label"], classes


def _torch_logits(run_dir, step, x):
    """The reference MLP (64-256-256-10) with the weights of checkpoints/step-<step>, fp32, eval."""
    import torch
    from safetensors.torch import load_model

    from hpclaunch.train_entry.model import MLP

    model = MLP(64, 10, (256, 256), 0.1)
    load_model(model, os.path.join(run_dir, "checkpoints", f"step-{step}", "model.safetensors"))
    with torch.no_grad():
        return model.eval()(torch.from_numpy(x)).numpy()


def _ort_logits(onnx_path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["features"]
    return session.run(None, {"features": x})[0]


def test_the_end_of_run_export_predicts_what_the_checkpoint_does(exported_run, digits_csv):
    import onnx
    import torch

    run_dir = exported_run
    exports = os.path.join(run_dir, "exports")
    assert sorted(os.listdir(exports)) == ["model.json", "model.onnx"]       # no temp file left
    with open(os.path.join(run_dir, ".hpclaunch", "finished")) as f:
        fin = json.load(f)
    steps = sorted(int(n.split("-")[1]) for n in os.listdir(os.path.join(run_dir, "checkpoints")))
    assert fin["step"] == EPOCHS * STEPS_PER_EPOCH and steps == [11, 22, 33]   # keep_checkpoints: 5 kept them
    with open(os.path.join(exports, "model.json")) as f:
        desc = json.load(f)
    x, y, names, classes = _validation(digits_csv)
    assert desc["step"] == fin["step"] and desc["checkpoint"] == f"checkpoints/step-{fin['step']}"
    assert desc["val_accuracy"] == fin["val_accuracy"]
    assert desc["input"] == {"name": "features", "shape": ["batch", 64], "dtype": "float32"}
    assert desc["feature_names"] == names and desc["classes"] == classes == list(range(10))
    assert desc["torch_version"] == torch.__version__
    # a bf16 run: the graph is fp32 anyway
    assert desc["trained_precision"] == "bf16" and desc["precision"] == "fp32"
    graph = onnx.load(os.path.join(exports, "model.onnx"))
    assert graph.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert desc["opset"] == next(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx"))
    import hashlib
    assert desc["sha256"] == hashlib.sha256(open(os.path.join(exports, "model.onnx"), "rb").read()).hexdigest()

    got = _ort_logits(os.path.join(exports, "model.onnx"), x)         # the whole validation split, one batch
    want = _torch_logits(run_dir, fin["step"], x)
    assert got.shape == (len(y), 10) and len(y) == round(ROWS * 0.2)
    assert (got.argmax(1) == want.argmax(1)).all()
    assert np.abs(got - want).max() < 1e-4, np.abs(got - want).max()
    # the trained model, not an initial one: its accuracy is the run's (validated under bf16 autocast)
    accuracy = float((got.argmax(1) == y).mean())
    assert accuracy > 0.8 and abs(accuracy - fin["val_accuracy"]) <= 0.02, (accuracy, fin["val_accuracy"])


def test_hpclaunch_export_of_an_earlier_step_matches_that_step(exported_run, digits_csv, tmp_path):
    run_dir = exported_run
    x, _, _, _ = _validation(digits_csv)
    out = tmp_path / "step11"
    out.mkdir()
    proc = hl("export", run_dir, "--step", "11", "-o", str(out), "--json", cwd=str(tmp_path), timeout=180)
    desc = json.loads(proc.stdout)
    assert desc["step"] == 11 and desc["path"] == str(out / "model.onnx")
    got = _ort_logits(str(out / "model.onnx"), x)
    want = _torch_logits(run_dir, 11, x)
    assert (got.argmax(1) == want.argmax(1)).all() and np.abs(got - want).max() < 1e-4
    # ...and it is step 11's model, not the last one's
    assert np.abs(got - _torch_logits(run_dir, 33, x)).max() > 1e-2
    # the end-of-run export in the run directory is untouched
    with open(os.path.join(run_dir, "exports", "model.json")) as f:
        assert json.load(f)["step"] == 33


def test_refusals_are_one_line_with_exit_2(exported_run, tmp_path):
    empty = tmp_path / "no-checkpoints"
    empty.mkdir()
    proc = hl("export", str(empty), check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{empty}: no checkpoints to export" in proc.stderr
    assert not (empty / "exports").exists()

    proc = hl("export", exported_run, "--step", "7", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no checkpoint at step 7; the checkpoints here are at steps 33, 22, 11" in proc.stderr


ODD_MODEL = '''
import torch
from torch import nn


@torch.library.custom_op("hpclaunch_test::soft_sign_keep", mutates_args=())
def soft_sign_keep(x: torch.Tensor) -> torch.Tensor:   # no ONNX translation is registered for it
    return x / (1 + x.abs())


@soft_sign_keep.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


soft_sign_keep.register_autograd(lambda ctx, grad: grad / (1 + ctx.saved_tensors[0].abs()) ** 2, setup_context=_setup)


class Odd(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.a, self.b = nn.Linear(in_features, 32), nn.Linear(32, num_classes)

    def forward(self, x):
        return self.b(soft_sign_keep(self.a(x)))


def make(in_features, num_classes):
    return Odd(in_features, num_classes)
'''


def test_an_operator_onnx_cannot_translate_is_named_in_one_line(tmp_path, digits_csv, onnx_stack):
    (tmp_path / "odd_model.py").write_text(ODD_MODEL)
    run_dir = tmp_path / "run"
    r = run([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", run_dir, "--max-steps", 2,
             "--model", "odd_model:make", "--export", "onnx", "--no-tensorboard", "--no-mlflow"],
            env=rank_env(PYTHONPATH=tmp_path), timeout=120)
    assert r.returncode == 2, r.stdout[-3000:]
    errors = [ln for ln in r.stdout.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "Traceback" not in r.stdout, r.stdout[-3000:]
    assert "training finished at step 2" in errors[0]
    assert "operator hpclaunch_test::soft_sign_keep has no ONNX translation" in errors[0], errors[0]
    # the training is kept: finished, its checkpoint there, and no (partial) export
    assert (run_dir / ".hpclaunch" / "finished").exists() and (run_dir / "checkpoints" / "step-2").is_dir()
    assert not (run_dir / "exports").exists()

    proc = hl("export", str(run_dir), check=False, cwd=str(tmp_path))   # a manifest's factory is not imported...
    assert proc.returncode == 2 and "--model odd_model:make" in proc.stderr, proc.stderr
    proc = hl("export", str(run_dir), "--model", "odd_model:make", check=False, cwd=str(tmp_path))  # ...unless named
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "operator hpclaunch_test::soft_sign_keep has no ONNX translation" in proc.stderr


def test_a_missing_extra_is_one_line_before_any_training(tmp_path, digits_csv, monkeypatch, caplog, run_cli,
                                                          exported_run):
    monkeypatch.setitem(sys.modules, "onnxscript", None)   # what `import onnxscript` finds when not installed
    code, out, err = run_cli("export", exported_run)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "needs the onnxscript package, not installed here: pip install 'hpclaunch[export]'" in err

    from hpclaunch.train_entry.cli import main

    run_dir = tmp_path / "run"
    assert main(["--data", digits_csv, "--run-dir", str(run_dir), "--export", "onnx"]) == 2
    assert "pip install 'hpclaunch[export]'" in caplog.text
    assert not run_dir.exists()    # refused before training started
