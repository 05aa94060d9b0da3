"""``python -m hpclaunch.train_entry``: flags -> TrainConfig -> trainer; exit codes.

Exit 0: finished (``.hpclaunch/finished`` written). Exit $HPCLAUNCH_REQUEUE_EXIT (75): a
requeue was requested and a checkpoint saved. Exit 2: bad configuration / limits / data.
Exit 1: stopped, one line says why: the training diverged, or a checkpoint could not be written.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from hpclaunch.spec.train import EXPORT_FORMATS, EXPORT_PRECISIONS, LR_SCALINGS, MODEL_SIZES, OFFLOADS, PRECISIONS, ZERO_STAGES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpclaunch.train_entry",
                                description="hpclaunch rank-side trainer (any launcher or none).",
                                argument_default=None)
    g = p.add_argument_group("data / model")
    g.add_argument("--data", help="CSV file with a header and a label column, or 'digits' (scikit-learn's digits, "
                                  "built in; python -m hpclaunch.train_entry.digits FILE.csv writes them as CSV)")
    g.add_argument("--label-column", help="label column name (default: label)")
    g.add_argument("--val-fraction", type=float, help="validation share, seeded split (default 0.2)")
    g.add_argument("--model", help="mlp (the default), transformer (built in, sized by --size), or module:factory "
                                   "returning an nn.Module")
    g.add_argument("--size", dest="model_size", choices=MODEL_SIZES,
                   help="size of the built-in transformer (default small; docs/train-entry.md lists them)")
    g.add_argument("--hidden", help="MLP hidden widths, comma-separated (default 256,256)")
    g.add_argument("--dropout", type=float, help="MLP dropout (default 0.1)")
    g.add_argument("--workers", type=int, help="DataLoader workers (default 0: data is in memory)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, help="epochs (default 10)")
    g.add_argument("--max-steps", type=int, help="stop after this many optimizer steps in total")
    g.add_argument("--batch-size", type=int, help="batch per GPU / per rank (default 64)")
    g.add_argument("--global-batch", type=int, help="global batch; gradient accumulation = global / (batch x world)")
    g.add_argument("--grad-accum", type=int, help="accumulation steps when --global-batch is not given")
    g.add_argument("--lr", type=float, help="base learning rate for one rank (default 1e-3)")
    g.add_argument("--lr-scaling", choices=LR_SCALINGS, help="scale LR with world size (default linear)")
    g.add_argument("--warmup-steps", type=int, help="linear LR warmup steps (default 0)")
    g.add_argument("--schedule", choices=["cosine", "constant"], help="LR after warmup (default cosine)")
    g.add_argument("--optimizer", choices=["adamw", "sgd"])
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--clip-grad", type=float, help="max gradient norm, 0 = off (default 0)")
    g.add_argument("--precision", choices=PRECISIONS, help="fp16 = CUDA + GradScaler; bf16 autocast")
    g.add_argument("--seed", type=int, help="job seed; each rank uses seed + rank (default 0)")
    g.add_argument("--deterministic", action="store_true", default=None,
                   help="torch.use_deterministic_algorithms, 0 workers: bitwise-reproducible resume")
    g.add_argument("--zero", type=int, choices=ZERO_STAGES,
                   help="ZeRO stage: 0 DDP (default), 1 optimizer state sharded, 2 + gradients, 3 + parameters")
    g.add_argument("--offload", choices=OFFLOADS,
                   help="params: keep the sharded parameters, gradients and optimizer state in host memory "
                        "(FSDP2 CPUOffloadPolicy; --zero 2 or 3)")
    g = p.add_argument_group("run / checkpoints / distributed")
    g.add_argument("--run-dir", help="run directory (default $HPCLAUNCH_RUN_DIR, else ./runs/<name>-local)")
    g.add_argument("--name", help="run name for the local run directory")
    g.add_argument("--checkpoint-every", type=int, help="checkpoint every N optimizer steps (0 = epoch ends only)")
    g.add_argument("--checkpoint-interval", dest="checkpoint_interval_s", type=float,
                   help="checkpoint every S seconds as well (default $HPCLAUNCH_CHECKPOINT_INTERVAL_S, which the "
                        "job runtime sets from the failure rate, when --checkpoint-every is 0; 0 = off)")
    g.add_argument("--keep-checkpoints", type=int, help="keep the newest K checkpoints (default 3)")
    g.add_argument("--sync-checkpoints", dest="async_checkpoint", action="store_false", default=None,
                   help="the step waits until each checkpoint is durable (default: fsync and publish "
                        "run beside the next steps)")
    g.add_argument("--export", action="append", choices=EXPORT_FORMATS, metavar="FORMAT",
                   help="at the end, rank 0 exports the last checkpoint to RUN_DIR/exports/model.onnx + model.json "
                        "(onnx; needs hpclaunch[export])")
    g.add_argument("--export-precision", choices=EXPORT_PRECISIONS,
                   help="dtype of the exported graph (default fp32, whatever --precision trained in)")
    g.add_argument("--no-resume", dest="resume", action="store_false", default=None,
                   help="ignore existing checkpoints")
    g.add_argument("--backend", choices=["auto", "gloo", "nccl", "horovod"], help="default auto")
    g.add_argument("--dist-timeout", type=float, help="collective timeout in seconds (default 600)")
    g.add_argument("--stop-check-every", type=int,
                   help="optimizer steps between requeue-flag agreements across ranks (default 10)")
    g.add_argument("--stop-after-step", type=int, help="test hook: act as if requeue was requested at this step")
    g.add_argument("--log-every", type=int, help="write a step record every N steps (default 10; 1 for every step)")
    g.add_argument("--no-tensorboard", dest="tensorboard", action="store_false", default=None)
    g.add_argument("--no-mlflow", dest="mlflow", action="store_false", default=None)
    g.add_argument("--quiet", action="store_true", default=False, help="log warnings only")
    return p


def main(argv=None) -> int:
    args = vars(build_parser().parse_args(argv))
    quiet = args.pop("quiet")
    from .distenv import rank_hint

    rank = rank_hint(os.environ)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
                        format=f"[rank {rank}] %(asctime)s %(levelname)s %(message)s")
    from .checkpoint import CheckpointError
    from .config import ConfigError, DataError, TrainingDiverged, build_config, load_run_job

    run_dir = args.get("run_dir") or os.environ.get("HPCLAUNCH_RUN_DIR")
    try:
        job = load_run_job(run_dir, os.environ)
        cfg = build_config(args, job)
        # fail fast, before importing torch: limits and accumulation need only the world size
        from .config import derive
        from .distenv import detect

        derive(cfg, detect(os.environ).world_size)
        if cfg.export:  # before training, on every rank: not after hours, on rank 0 alone
            from .export import require_extra

            for fmt in cfg.export:
                require_extra(fmt)
        from .digits import BUILTIN_DATA

        if not cfg.data:
            raise ConfigError("no training data: give --data FILE.csv (or --data digits)")
        if os.path.isdir(cfg.data):
            raise ConfigError(f"--data: {cfg.data!r} is a directory; give a CSV file (or --data digits)")
        if os.path.exists(cfg.data) and not os.path.isfile(cfg.data):
            raise ConfigError(f"--data: {cfg.data!r} is not a regular file; give a CSV file (or --data digits)")
        if not (os.path.isfile(cfg.data) or cfg.data in BUILTIN_DATA):
            raise ConfigError(f"--data: no such file {cfg.data!r} (built in: {', '.join(BUILTIN_DATA)})")
        from .trainer import ModelTrainer

        ModelTrainer(config=cfg).train()
    except (ConfigError, DataError) as exc:
        logging.getLogger("hpclaunch.train_entry").error("%s", exc)
        return 2
    except (TrainingDiverged, CheckpointError) as exc:  # not the input's fault: a run that cannot go on
        logging.getLogger("hpclaunch.train_entry").error("%s", exc)
        return 1
    return 0
