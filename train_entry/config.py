"""Training configuration: built-in defaults < job.yaml (profile.training, then train:) < CLI.

job.yaml is ``$HPCLAUNCH_RUN_DIR/job.yaml`` (written at submit). Every key is
optional; unknown keys are ignored. Limits come from ``profile.limits``.

The train: keys' defaults and choices, the LR scaling and the rules against the limits are
hpclaunch.spec.train's, the ones `hpclaunch validate` applies at submit: a job that passes there
passes here (unless this rank's command line changes a setting).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional

from hpclaunch.spec.train import (DEFAULTS, EXPORT_FORMATS, EXPORT_PRECISIONS, LR_SCALINGS, MODEL_SIZES, OFFLOADS,
                                  PRECISIONS, ZERO_STAGES, Train, scaled_lr, train_problems)


class ConfigError(ValueError):
    """A setting is invalid or outside the profile's limits (message says which and why)."""


class DataError(ValueError):
    """The training data cannot be used (defined here so the CLI can catch it without torch)."""


class TrainingDiverged(RuntimeError):
    """The weights blew up to NaN/inf (the message names the step, the loss and what was kept)."""


@dataclasses.dataclass
class Limits:
    max_epochs: Optional[int] = None
    max_batch_per_gpu: Optional[int] = None
    lr_range: Optional[tuple] = None   # (min, max), applied to the effective (scaled) LR
    profile: Optional[str] = None      # the profile's name, for messages


@dataclasses.dataclass
class TrainConfig:
    data: Optional[str] = None
    label_column: str = "label"
    val_fraction: float = 0.2
    epochs: int = DEFAULTS["epochs"]
    max_steps: Optional[int] = None          # stop (and finish) after this many optimizer steps
    batch_size: int = DEFAULTS["batch_per_gpu"]      # per GPU / per rank
    global_batch: Optional[int] = DEFAULTS["global_batch"]  # -> gradient-accumulation steps
    grad_accum: int = 1                      # used when global_batch is not set
    lr: float = DEFAULTS["lr"]               # base LR, for one rank
    lr_scaling: str = DEFAULTS["lr_scaling"]  # none | linear | sqrt (with the data-parallel world size)
    warmup_steps: int = 0
    schedule: str = "cosine"                 # cosine | constant (after warmup)
    optimizer: str = "adamw"                 # adamw | sgd
    weight_decay: float = 0.0
    momentum: float = 0.9
    clip_grad: float = 0.0                   # max global grad norm; 0 = no clipping
    precision: str = DEFAULTS["precision"]   # fp32 | bf16 | fp16
    seed: int = DEFAULTS["seed"]
    model: Optional[str] = None              # mlp (default), transformer, or module:factory
    model_size: str = DEFAULTS["model_size"]  # the built-in transformer's size (model.TRANSFORMER_SIZES)
    hidden: str = "256,256"
    dropout: float = 0.1
    workers: int = 0
    checkpoint_every: int = DEFAULTS["checkpoint_every"]  # optimizer steps; 0 = only at epoch ends
    # seconds; None: $HPCLAUNCH_CHECKPOINT_INTERVAL_S when checkpoint_every is 0 (checkpoint_interval()); 0: off
    checkpoint_interval_s: Optional[float] = None
    keep_checkpoints: int = DEFAULTS["keep_checkpoints"]
    async_checkpoint: bool = DEFAULTS["async_checkpoint"]  # fsync + publish beside training (False: the step waits)
    resume: bool = True
    deterministic: bool = False
    backend: str = "auto"                    # auto | gloo | nccl | horovod
    dist_timeout: float = 600.0              # seconds, for every collective
    stop_check_every: int = 10               # optimizer steps between requeue-flag agreements
    stop_after_step: Optional[int] = None    # test hook: act as if the requeue flag appeared at this step
    log_every: int = DEFAULTS["log_every"]   # step records every N optimizer steps (as TorchTitan's log_freq)
    run_dir: Optional[str] = None
    name: Optional[str] = None
    tensorboard: bool = True                 # used only if the package is installed
    mlflow: bool = True
    export: list = dataclasses.field(default_factory=list)  # formats rank 0 writes to exports/ at the end
    export_precision: str = "fp32"           # the exported graph's dtype, whatever --precision trained with
    zero: int = DEFAULTS["zero"]             # ZeRO stage 0-3 (sharding.py: what each maps to)
    offload: str = DEFAULTS["offload"]       # none | params (FSDP2 CPUOffloadPolicy, zero 2-3)
    limits: Limits = dataclasses.field(default_factory=Limits)


# job.yaml key -> TrainConfig field
_KEYMAP = {
    "epochs": "epochs", "max_steps": "max_steps", "batch_per_gpu": "batch_size", "batch_size": "batch_size",
    "global_batch": "global_batch", "grad_accum": "grad_accum", "lr": "lr", "lr_scaling": "lr_scaling",
    "warmup_steps": "warmup_steps", "schedule": "schedule", "optimizer": "optimizer",
    "weight_decay": "weight_decay", "clip_grad": "clip_grad", "precision": "precision", "seed": "seed",
    "checkpoint_every": "checkpoint_every", "keep_checkpoints": "keep_checkpoints",
    "label_column": "label_column", "val_fraction": "val_fraction", "model": "model",
    "deterministic": "deterministic", "dist_timeout": "dist_timeout", "workers": "workers",
    "log_every": "log_every", "async_checkpoint": "async_checkpoint",
    "export": "export", "export_precision": "export_precision", "zero": "zero", "offload": "offload",
    "model_size": "model_size",
}


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, Mapping) or key not in d:
            return None
        d = d[key]
    return d


def load_job_yaml(path: str) -> dict:
    """The parsed job.yaml, or {} if absent. A malformed file is an error (say which)."""
    if not path or not os.path.exists(path):
        return {}
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return data if isinstance(data, dict) else {}


def load_run_job(run_dir: Optional[str], environ: Mapping[str, str]) -> dict:
    """The job.yaml a rank runs under, with its sweep point's ``train.KEY`` values over ``train:``.

    A sweep task's run directory is ``task<N>`` inside the sweep's folder, which holds job.yaml.
    """
    if not run_dir:
        return {}
    path = os.path.join(run_dir, "job.yaml")
    if not os.path.exists(path) and environ.get("HPCLAUNCH_SWEEP_INDEX") is not None:
        path = os.path.join(os.path.dirname(os.path.normpath(run_dir)), "job.yaml")
    job = load_job_yaml(path)
    point_text = environ.get("HPCLAUNCH_SWEEP_POINT")
    if not point_text:
        return job
    import json

    try:
        point = json.loads(point_text)
    except ValueError as exc:
        raise ConfigError(f"HPCLAUNCH_SWEEP_POINT is not JSON ({exc}); it is set by the job script") from exc
    swept = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("train.")} \
        if isinstance(point, dict) else {}
    if not swept:
        return job
    train = job.get("train") if isinstance(job.get("train"), Mapping) else {}
    return {**job, "train": {**train, **swept}}


def job_overrides(job: Mapping) -> tuple[dict, Limits]:
    """(settings from profile.training then train:, limits) taken from a parsed job.yaml."""
    settings: dict = {}
    for block in (_get(job, "profile", "training"), _get(job, "train")):
        if isinstance(block, Mapping):
            for key, value in block.items():
                if key in _KEYMAP and value is not None:
                    settings[_KEYMAP[key]] = value
    lim = _get(job, "profile", "limits") or {}
    name = _get(job, "profile", "name")
    limits = Limits(profile=name if isinstance(name, str) else None)
    if isinstance(lim, Mapping):
        if lim.get("max_epochs") is not None:
            limits.max_epochs = int(lim["max_epochs"])
        if lim.get("max_batch_per_gpu") is not None:
            limits.max_batch_per_gpu = int(lim["max_batch_per_gpu"])
        rng = lim.get("lr_range")
        if rng is not None:
            if not (isinstance(rng, (list, tuple)) and len(rng) == 2):
                raise ConfigError(f"profile.limits.lr_range must be [min, max], got {rng!r}")
            limits.lr_range = (float(rng[0]), float(rng[1]))
    return settings, limits


def _coerce(name: str, value: Any) -> Any:
    default = getattr(TrainConfig(), name)
    if value is None:
        return None
    if name == "export":  # a list (train.export: [onnx], --export onnx), or a sweep point's text "onnx,..."
        items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
        if items is None:
            raise ConfigError(f"train.export must be a list of formats ({', '.join(EXPORT_FORMATS)}), got {value!r}")
        return [str(v).strip() for v in items if str(v).strip()]
    if isinstance(default, bool):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    try:
        if isinstance(default, int) or name in ("max_steps", "global_batch", "stop_after_step"):
            if isinstance(value, str):  # a sweep point's text: "2", or "2.0" for a float written 2.0
                value = float(value) if any(c in value for c in ".eE") else int(value)
            if isinstance(value, float) and not value.is_integer():
                raise ConfigError(f"{name} must be an integer, got {value}")
            return int(value)
        if isinstance(default, float):
            return float(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if name == "hidden" and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def build_config(cli: Mapping[str, Any] | None = None, job: Mapping | None = None) -> TrainConfig:
    """Merge: defaults < job.yaml < cli (keys with value None are 'not given')."""
    cfg = TrainConfig()
    settings, limits = job_overrides(job or {})
    for key, value in settings.items():
        setattr(cfg, key, _coerce(key, value))
    for key, value in (cli or {}).items():
        if value is None or key == "limits":
            continue
        if not hasattr(cfg, key):
            raise ConfigError(f"unknown setting {key!r}")
        setattr(cfg, key, _coerce(key, value))
    cfg.limits = limits
    return cfg


def checkpoint_interval(cfg: TrainConfig, environ: Mapping[str, str]) -> Optional[float]:
    """Seconds between checkpoints by time, or None: --checkpoint-interval, else the job runtime's
    $HPCLAUNCH_CHECKPOINT_INTERVAL_S (docs/recovery.md) unless --checkpoint-every chose steps."""
    value = cfg.checkpoint_interval_s
    if value is None and not cfg.checkpoint_every:
        text = environ.get("HPCLAUNCH_CHECKPOINT_INTERVAL_S", "")
        try:
            value = float(text) if text else None
        except ValueError:
            raise ConfigError(f"HPCLAUNCH_CHECKPOINT_INTERVAL_S={text!r} is not a number of seconds "
                              "(the job runtime sets it; unset it or give --checkpoint-interval)") from None
    if value is None or value == 0:
        return None
    if not 0 < value < float("inf"):
        raise ConfigError(f"--checkpoint-interval must be a number of seconds >= 0, got {value}")
    return value


def checkpoint_mtbf(cfg: TrainConfig, environ: Mapping[str, str]) -> Optional[float]:
    """The MTBF the job runtime's interval assumed (HPCLAUNCH_MTBF_S, recovery.checkpoint_interval: auto),
    when that interval applies: the rank retunes it with the checkpoint cost it measures itself."""
    if cfg.checkpoint_interval_s is not None or cfg.checkpoint_every or not environ.get("HPCLAUNCH_CHECKPOINT_INTERVAL_S"):
        return None
    try:
        value = float(environ.get("HPCLAUNCH_MTBF_S", ""))
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


@dataclasses.dataclass(frozen=True)
class Derived:
    accum_steps: int
    global_batch: int
    lr: float                # effective LR after scaling


def derive(cfg: TrainConfig, world_size: int) -> Derived:
    """Validate against the limits and compute accumulation steps and the effective LR."""
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"--precision must be {_either(PRECISIONS)}, got {cfg.precision!r}")
    bad = [f for f in cfg.export if f not in EXPORT_FORMATS]
    if bad:
        raise ConfigError(f"--export {bad[0]}: not a format hpclaunch exports; use {_either(EXPORT_FORMATS)}")
    if cfg.export_precision not in EXPORT_PRECISIONS:
        raise ConfigError(f"--export-precision must be {_either(EXPORT_PRECISIONS)}, got {cfg.export_precision!r}")
    if cfg.zero not in ZERO_STAGES:
        raise ConfigError(f"--zero must be {_either(tuple(map(str, ZERO_STAGES)))}, got {cfg.zero!r}")
    if cfg.offload not in OFFLOADS:
        raise ConfigError(f"--offload must be {_either(OFFLOADS)}, got {cfg.offload!r}")
    if cfg.model_size not in MODEL_SIZES:
        raise ConfigError(f"--size must be {_either(MODEL_SIZES)}, got {cfg.model_size!r}")
    if cfg.lr_scaling not in LR_SCALINGS:
        raise ConfigError(f"--lr-scaling must be {_either(LR_SCALINGS)}, got {cfg.lr_scaling!r}")
    if cfg.epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {cfg.epochs}")
    if cfg.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {cfg.batch_size}")
    if cfg.global_batch is not None and cfg.global_batch < 1:
        raise ConfigError(f"--global-batch must be >= 1, got {cfg.global_batch}")
    # the rules `hpclaunch validate` applied at submit, on the settings and world of this run
    train = Train(epochs=cfg.epochs, batch_per_gpu=cfg.batch_size, global_batch=cfg.global_batch, lr=cfg.lr,
                  zero=cfg.zero, offload=cfg.offload)
    found = train_problems(train, world_size, cfg.limits, cfg.lr_scaling, cfg.limits.profile or "")
    if found:
        raise ConfigError("\n".join(f"{path} ({_FLAGS[path]}) {value if isinstance(value, str) else format(value, 'g')}: "
                                     f"{message} \u2014 {fix}" for path, message, value, fix in found))
    per_step = cfg.batch_size * world_size
    if cfg.global_batch is not None:
        accum = cfg.global_batch // per_step
    else:
        if cfg.grad_accum < 1:
            raise ConfigError(f"grad_accum must be >= 1, got {cfg.grad_accum}")
        accum = cfg.grad_accum
    lr = scaled_lr(cfg.lr, cfg.lr_scaling, world_size)
    if cfg.log_every < 1:
        raise ConfigError(f"log_every must be >= 1 (got {cfg.log_every})")
    if cfg.checkpoint_every < 0 or cfg.keep_checkpoints < 1:
        raise ConfigError("checkpoint_every must be >= 0 and keep_checkpoints >= 1")
    return Derived(accum, per_step * accum, lr)


# train: key path (as train_problems names it) -> the flag that also sets it
_FLAGS = {"train.epochs": "--epochs", "train.batch_per_gpu": "--batch-size", "train.global_batch": "--global-batch",
          "train.lr": "--lr", "train.offload": "--offload", "train.zero": "--zero"}


def _either(choices: tuple) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else choices[0]
