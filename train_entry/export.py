"""Deploy what was trained: ``exports/model.onnx`` and ``exports/model.json`` from a checkpoint.

Used by train_entry at the end of a run (``--export onnx``, ``train.export: [onnx]``; rank 0, from
the checkpoint of the last step: train_entry tracks no "best" one) and by ``hpclaunch export RUN_DIR
[--step N]`` afterwards, from any kept checkpoint that verifies (the newest by default).

The model is rebuilt from the checkpoint's manifest (``model``: the factory, the MLP's shape, the
CSV's feature names and classes, written by the trainer), its weights come from
``model.safetensors`` (no pickle is loaded), and ``torch.onnx.export(dynamo=True)`` turns it into an
fp32 graph (``precision`` fp16 / bf16 on request, whatever dtype training ran in) with a dynamic
batch dimension. When onnxruntime is importable the graph is run on CPU against the torch model on
a fixed random batch and the largest difference is kept in model.json. Both files are written
atomically, model.onnx first; model.json holds its sha256.

Nothing heavy is imported at module import: torch, onnx and onnxscript load inside ``export_run``.
Every failure is an ``ExportError`` (a ConfigError: train_entry and the CLI print one line, exit 2).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from typing import Optional

from hpclaunch.common.atomic import write_atomic

from . import checkpoint as ckpt
from . import manifest as mf
from . import sharded_checkpoint as sharded
from .config import ConfigError

SCHEMA = "hpclaunch.export/1"
FORMATS = ("onnx",)
OPSET = 18
NEEDED = ("onnx", "onnxscript")   # torch.onnx's exporter (dynamo=True) needs both
INSTALL = "pip install 'hpclaunch[export]'"
CHECK_ROWS = 64


class ExportError(ConfigError):
    """The run cannot be exported (the message names the file or setting and the fix)."""


def missing_packages() -> list:
    """The packages exporting needs that cannot be found (found without importing them)."""
    import importlib.util

    missing = []
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (import blocked)
            found = False
        if not found:
            missing.append(name)
    return missing


def require_extra(fmt: str = "onnx") -> None:
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt}: hpclaunch exports {', '.join(FORMATS)} only")
    missing = missing_packages()
    if missing:
        raise ExportError(f"exporting to ONNX needs the {' and '.join(missing)} package"
                          f"{'s' if len(missing) > 1 else ''}, not installed here: {INSTALL}")


def choose_checkpoint(run_dir: str, step: Optional[int] = None) -> tuple[str, dict]:
    """(path, manifest) of the checkpoint at ``step``, or of the newest one that verifies."""
    if not os.path.isdir(run_dir):
        raise ExportError(f"{run_dir}: no such run directory \u2014 name the run directory of a train_entry run")
    store = ckpt.CheckpointStore(os.path.join(run_dir, "checkpoints"), rank=-1)  # not rank 0: creates nothing
    steps = store.list_steps()
    if not steps:
        raise ExportError(f"{run_dir}: no checkpoints to export (no checkpoints/step-N in it) \u2014 name a run "
                          "directory that train_entry has written checkpoints into")
    listed = ", ".join(map(str, steps))
    if step is not None:
        if step not in steps:
            raise ExportError(f"{run_dir}: no checkpoint at step {step}; the checkpoints here are at steps "
                              f"{listed} \u2014 pick one of them with --step")
        ok, reason, manifest = ckpt.verify(store.step_dir(step))
        if not ok:
            others = ", ".join(str(s) for s in steps if s != step) or "none here"
            raise ExportError(f"{store.step_dir(step)}: does not verify ({reason}) \u2014 export another step "
                              f"({others})")
        return store.step_dir(step), manifest
    found, skipped = store.valid_checkpoints()
    if not found:
        why = "; ".join(f"{os.path.basename(p)}: {r}" for p, r in skipped)
        raise ExportError(f"{run_dir}: none of its checkpoints verifies ({why}) \u2014 nothing here can be exported")
    return found[0]


def _model_info(run_dir: str, path: str, manifest: dict) -> dict:
    """What rebuilds the model, checked (manifest.model_info): the manifest's ``model`` (written by
    train_entry), else (checkpoints from before it did) the run's configuration in
    metrics/rank0.jsonl and its data file."""
    where, info = os.path.join(path, ckpt.MANIFEST), manifest.get("model")
    if info is None:
        where, info = _legacy_model_info(run_dir, manifest)
    try:
        return mf.model_info(info)
    except mf.BadCheckpoint as exc:
        raise ExportError(f"{where}: {exc} \u2014 export a checkpoint written by train_entry") from None


def _legacy_model_info(run_dir: str, manifest: dict) -> tuple[str, dict]:
    from .metrics import read_metrics

    path = os.path.join(run_dir, "metrics", "rank0.jsonl")
    headers = [r for r in read_metrics(path) if r.get("kind") == "header"] if os.path.isfile(path) else []
    config = headers[-1].get("config") if headers else None
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, str) or not data:
        raise ExportError(f"{run_dir}: step {manifest['step']}'s manifest does not describe the model, nor "
                          f"does {path} \u2014 export a checkpoint written by this hpclaunch")
    from .data import load_data
    from .digits import BUILTIN_DATA

    label = config.get("label_column") or "label"
    try:
        if not (data in BUILTIN_DATA and not os.path.exists(data)) and not stat.S_ISREG(os.stat(data).st_mode):
            raise OSError(f"{data} is not a regular file")  # a FIFO or a device would block or never end
        loaded = load_data(data, label if isinstance(label, str) else "label")
    except (OSError, ValueError) as exc:
        raise ExportError(f"{run_dir}: the model's shape comes from its data {data!r}, which cannot be "
                          f"read ({exc}) \u2014 export a checkpoint written by this hpclaunch") from None
    return path, {"spec": config.get("model"), "hidden": config.get("hidden", "256,256"),
                  "dropout": config.get("dropout", 0.1), "in_features": loaded.num_features,
                  "num_classes": loaded.num_classes, "feature_names": loaded.feature_names,
                  "classes": loaded.classes, "data": data, "label_column": config.get("label_column"),
                  "precision": config.get("precision")}


def _factory(path: str, info: dict, factory: Optional[str]) -> Optional[str]:
    """The module:factory to import: only one the caller names (the trainer's own --model, or
    export's --model). A factory the manifest names is the run directory's code, and a run
    directory may be a colleague's: export does not import it unless told to (the built-in
    models, by name, are train_entry's own)."""
    if factory is not None and factory not in mf.BUILTIN_MODELS:
        if not mf.FACTORY.fullmatch(factory):
            raise ExportError(f"--model {factory!r}: expected module:factory (e.g. my_models:make)")
        return factory
    if info["spec"] and info["spec"] not in mf.BUILTIN_MODELS:
        raise ExportError(f"{os.path.join(path, ckpt.MANIFEST)}: the model is made by {info['spec']}, code "
                          "of the run's own, and export imports no module a run directory names \u2014 if you "
                          f"trust that code, name it: hpclaunch export ... --model {info['spec']}")
    return None


def _saved_shapes(path: str, manifest: dict) -> dict:
    """{name: shape} of the checkpoint's weights, from file headers only (no tensor is read)."""
    if sharded.is_sharded(manifest):
        return sharded.saved_shapes(path, manifest)
    return ckpt.weights_shapes(os.path.join(path, "model.safetensors"))


def load_model(path: str, info: dict, factory: Optional[str] = None, manifest: Optional[dict] = None):
    """The checkpoint's model in eval mode, on CPU, fp32: a built-in model (the MLP, the transformer)
    of ``info``'s shape, or what ``factory`` (module:factory, trusted by the caller) makes; its
    weights from model.safetensors, or assembled whole from the ranks' shards of a sharded (ZeRO)
    checkpoint."""
    import sys

    import torch

    from .model import build_builtin, build_model

    manifest = manifest or {}
    weights = os.path.join(path, "model.safetensors")
    shape = (info["in_features"], info["num_classes"], info["hidden"], info["dropout"])
    builtin = info["spec"] or "mlp"
    if factory is None:
        # shapes first, the model's on the meta device: a manifest's absurd widths take no memory, and
        # the model is then built only as large as its (verified) weights
        try:
            saved = _saved_shapes(path, manifest)
            with torch.device("meta"):
                own = {k: list(v.shape) for k, v in build_builtin(builtin, *shape, info.get("size")).state_dict().items()}
        except ckpt.UnsafeCheckpoint as exc:
            raise ExportError(str(exc)) from None
        except OSError as exc:
            raise ExportError(f"{weights}: cannot be read ({exc.strerror or exc})") from None
        except RuntimeError as exc:  # sizes past int64
            raise ExportError(f"{path}: the manifest's model is too large to build ({ckpt.first_line(exc)})") from None
        why = ckpt.shapes_mismatch(saved, own, "the manifest's model")
        if why:
            raise ExportError(f"{path}: the weights do not fit the model ({why})")
        model = build_builtin(builtin, *shape, info.get("size"))
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as under `python -m hpclaunch.train_entry`: module:factory from here
        try:
            model = build_model(factory, *shape)
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            raise ExportError(f"{path}: cannot rebuild the model {factory!r} ({exc}) \u2014 run where its "
                              "module imports (PYTHONPATH)") from None
    try:
        if sharded.is_sharded(manifest):
            sharded.assemble(path, manifest, model)
        else:
            ckpt.load_weights(model, weights)
    except ckpt.UnsafeCheckpoint as exc:
        raise ExportError(str(exc)) from None
    except (RuntimeError, ValueError, KeyError, OSError) as exc:
        raise ExportError(f"{path}: the weights do not fit the model ({ckpt.first_line(exc)})") from None
    return model.float().eval()


_OPERATOR_PATTERNS = (
    r"No ONNX function found for <OpOverload\(op='([^']+)'",       # torch.onnx, dynamo=True
    r"target=torch\.ops\.([\w.]+)",                                 # its ConversionError
    r"Exporting the operator '([^']+)'",                           # the TorchScript exporter
    r"Unsupported FX nodes: \{[^}]*?'([\w.:]+)'",
)


def unsupported_operator(exc: BaseException) -> Optional[str]:
    """The operator torch.onnx could not translate, from the exception or the ones it wraps."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for pattern in _OPERATOR_PATTERNS:
            m = re.search(pattern, str(exc))
            if m:  # torch's spelling: namespace::name (aten::foo)
                name = re.sub(r"\.default$", "", m.group(1))
                return name if "::" in name else name.replace(".", "::", 1)
        exc = exc.__cause__ or exc.__context__
    return None


def to_onnx(model, example, where: str) -> bytes:
    import logging
    import warnings

    import torch

    batch = torch.export.Dim("batch", min=1)
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in quiet]
    try:
        for lg in quiet:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, (example,), None, dynamo=True, input_names=["features"],
                                        output_names=["logits"], dynamic_shapes=({0: batch},),
                                        opset_version=OPSET, external_data=False, verbose=False)
        return program.model_proto.SerializeToString()
    except ImportError as exc:
        raise ExportError(f"exporting to ONNX needs the onnx and onnxscript packages ({exc}): {INSTALL}") from None
    except Exception as exc:  # torch.onnx raises its own types (OnnxExporterError, ...) and plain ones
        op = unsupported_operator(exc)
        if op:
            raise ExportError(f"{where}: the model cannot be exported to ONNX: operator {op} has no ONNX "
                              f"translation (opset {OPSET}) \u2014 replace it in the model, or give torch.onnx a "
                              "translation for it (custom_translation_table)") from None
        deepest = exc
        while deepest.__cause__ is not None:
            deepest = deepest.__cause__
        first = next((ln.strip() for ln in str(deepest).splitlines() if ln.strip()), type(deepest).__name__)
        raise ExportError(f"{where}: the model cannot be exported to ONNX ({type(deepest).__name__}: "
                          f"{first[:300]})") from None
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)


def ort_check(onnx_bytes: bytes, model, in_features: int, dtype) -> dict:
    """Largest |difference| between ONNX Runtime (CPU) and torch on a fixed random batch."""
    try:
        import numpy as np
        import onnxruntime as ort
        import torch
    except ImportError as exc:
        return {"skipped": f"onnxruntime not importable ({exc})"}
    x = torch.randn(CHECK_ROWS, in_features, generator=torch.Generator().manual_seed(0)).to(dtype)
    try:
        session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        got = session.run(None, {"features": x.numpy() if dtype != torch.bfloat16 else x.float().numpy()})[0]
    except Exception as exc:  # onnxruntime's own error types (e.g. no CPU kernel for bf16 Gemm)
        return {"onnxruntime": ort.__version__, "skipped": str(exc).strip().splitlines()[0][:200]}
    with torch.no_grad():
        want = model(x).float().numpy()
    return {"onnxruntime": ort.__version__, "provider": "CPUExecutionProvider", "rows": CHECK_ROWS,
            "max_abs_diff": float(np.abs(got.astype(np.float32) - want).max())}


def export_run(run_dir: str, step: Optional[int] = None, fmt: str = "onnx", precision: str = "fp32",
               out_dir: Optional[str] = None, factory: Optional[str] = None) -> dict:
    """Write ``model.onnx`` and ``model.json`` into ``out_dir`` (default RUN_DIR/exports); returns
    model.json's content. ``factory``: the module:factory that makes the model, when it is not the
    built-in MLP (see ``_factory``)."""
    require_extra(fmt)
    run_dir = os.path.abspath(run_dir)
    out = os.path.abspath(out_dir) if out_dir else os.path.join(run_dir, "exports")
    if not out_dir and os.path.islink(out):  # the run directory's own folder, not where a link in it points
        raise ExportError(f"{out}: a symbolic link, not the run's exports folder \u2014 export into a folder "
                          "of your own (-o DIR)")
    path, manifest = choose_checkpoint(run_dir, step)
    info = _model_info(run_dir, path, manifest)
    factory = _factory(path, info, factory)
    try:
        import torch
    except ImportError:
        raise ExportError("exporting needs torch: pip install 'hpclaunch[train,export]'") from None
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if precision not in dtypes:
        raise ExportError(f"--precision {precision}: use one of {', '.join(dtypes)}")
    dtype = dtypes[precision]
    model = load_model(path, info, factory, manifest).to(dtype)
    example = torch.zeros(2, int(info["in_features"]), dtype=dtype)
    onnx_bytes = to_onnx(model, example, path)
    import onnx

    dtype_name = str(dtype).replace("torch.", "")
    desc = {
        "schema": SCHEMA, "format": fmt, "file": "model.onnx", "size": len(onnx_bytes),
        "sha256": hashlib.sha256(onnx_bytes).hexdigest(),
        "input": {"name": "features", "shape": ["batch", int(info["in_features"])], "dtype": dtype_name},
        "output": {"name": "logits", "shape": ["batch", int(info["num_classes"])], "dtype": dtype_name,
                   "argmax": "index into classes"},
        "feature_names": info.get("feature_names"), "classes": info.get("classes"),
        "label_column": info.get("label_column"), "data": info.get("data"),
        "step": manifest["step"], "epoch": manifest.get("epoch"), "checkpoint": os.path.relpath(path, run_dir),
        "val_accuracy": manifest["val_accuracy"] if "val_accuracy" in manifest
        else _val_from_metrics(run_dir, manifest["step"]),
        "precision": precision, "trained_precision": info.get("precision"), "opset": OPSET,
        "torch_version": torch.__version__, "onnx_version": onnx.__version__,
        "check": ort_check(onnx_bytes, model, int(info["in_features"]), dtype), "time_unix": time.time(),
    }
    try:
        os.makedirs(out, exist_ok=True)
        write_atomic(os.path.join(out, "model.onnx"), onnx_bytes, mode=0o644)
        write_atomic(os.path.join(out, "model.json"), json.dumps(desc, indent=1) + "\n", mode=0o644)
    except OSError as exc:
        raise ExportError(f"{out}: cannot write the export: {exc.strerror or exc} \u2014 pick a folder you can "
                          "write (--output)") from None
    return desc


def _val_from_metrics(run_dir: str, step: int) -> Optional[float]:
    """Validation accuracy at ``step`` from metrics/rank0.jsonl (checkpoints from before the manifest kept it)."""
    from .metrics import read_metrics

    path = os.path.join(run_dir, "metrics", "rank0.jsonl")
    if not os.path.isfile(path):
        return None
    found = [r.get("val_accuracy") for r in read_metrics(path) if r.get("kind") == "epoch" and r.get("step") == step]
    return found[-1] if found and isinstance(found[-1], (int, float)) and not isinstance(found[-1], bool) else None
