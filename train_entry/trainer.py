"""The reference trainer: ``ModelTrainer(backend=...).train("data.csv", epochs=10)``.

One optimizer step = ``accum_steps`` micro-batches of ``batch_size`` on every rank.
Checkpoints, the requeue check and metrics all happen at optimizer-step boundaries.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import os
import re
import socket
import time
from typing import Optional

import torch
import torch.nn.functional as F

from hpclaunch.common.checkpoint_interval import interval_s as daly_interval

from . import checkpoint as ckpt
from . import sharded_checkpoint as sharded
from .config import (ConfigError, TrainConfig, TrainingDiverged, build_config, checkpoint_interval, checkpoint_mtbf,
                     derive, load_run_job)
from .data import TrainLoader, load_data, make_tensors, split, val_shard
from .evaluate import VAL_BATCH, validate
from .memory import memory_fields
from .dist_init import Dist, init_distributed, set_deterministic
from .metrics import MetricsWriter
from .model import build_model
from .optim import grad_norm_, lr_lambda
from .resume import resume_newest
from .sharding import Sharding, plain
from .signals import StopRequest, requeue_exit_code, write_finished, write_requeue_marker

log = logging.getLogger("hpclaunch.train_entry")

# A checkpoint's files are written at its step; making them durable runs beside training and is
# agreed on (one all-reduce) this many optimizer steps later, a step every rank reaches together.
COMMIT_AFTER_STEPS = 10


class RequeueExit(SystemExit):
    """Raised after the requeue checkpoint; carries the requeue exit code (75)."""


@dataclasses.dataclass
class TrainResult:
    status: str                     # finished | requeue
    step: int
    epoch: int
    val_accuracy: Optional[float]
    val_loss: Optional[float]
    run_dir: str
    checkpoint: Optional[str]


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "train"


def resolve_run_dir(cfg: TrainConfig, env=None) -> str:
    env = os.environ if env is None else env
    if cfg.run_dir:
        return os.path.abspath(cfg.run_dir)
    if env.get("HPCLAUNCH_RUN_DIR"):
        return os.path.abspath(env["HPCLAUNCH_RUN_DIR"])
    name = cfg.name or env.get("HPCLAUNCH_JOB_NAME") or (
        os.path.splitext(os.path.basename(cfg.data))[0] if cfg.data else "train")
    return os.path.abspath(os.path.join("runs", f"{slug(name)}-local"))


class ModelTrainer:
    """Seed API. ``backend``: auto | gloo | nccl | horovod. Keyword overrides = TrainConfig fields."""

    def __init__(self, backend: str = "auto", config: Optional[TrainConfig] = None, **overrides):
        self.backend = backend
        self.config = config
        self.overrides = overrides

    def train(self, data: Optional[str] = None, epochs: Optional[int] = None, **overrides) -> TrainResult:
        cfg = self.config
        if cfg is None:
            run_dir_hint = overrides.get("run_dir") or self.overrides.get("run_dir") or os.environ.get("HPCLAUNCH_RUN_DIR")
            job = load_run_job(run_dir_hint, os.environ)
            cfg = build_config({**self.overrides, **overrides, "data": data, "epochs": epochs,
                                "backend": None if self.backend == "auto" else self.backend}, job)
        else:
            cfg = dataclasses.replace(cfg, **{k: v for k, v in
                                              {**self.overrides, **overrides, "data": data, "epochs": epochs}.items()
                                              if v is not None})
        return _Run(cfg).run()


class _Run:
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg

    # ------------------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg = self.cfg
        if not cfg.data:
            raise ConfigError("no training data: give --data FILE.csv")
        if cfg.deterministic:
            set_deterministic()
            cfg.workers = 0
        dist = init_distributed(backend=cfg.backend, timeout_s=cfg.dist_timeout, seed=cfg.seed,
                                group_of_one=cfg.zero > 0)
        self.dist = dist
        try:
            result = self._run(dist)
        finally:
            dist.shutdown()
        if cfg.export and dist.rank == 0:  # after `finished`: a model that will not export loses no training
            from .export import ExportError, export_run

            for fmt in cfg.export:
                try:
                    desc = export_run(result.run_dir, step=result.step, fmt=fmt, precision=cfg.export_precision,
                                      factory=cfg.model)  # this run's own --model, already imported
                except ExportError as exc:
                    raise ExportError(f"training finished at step {result.step}, but the export failed: {exc}; "
                                      f"`hpclaunch export {result.run_dir}"
                                      f"{' --model ' + cfg.model if cfg.model else ''}` retries it") from None
                log.info("exported step %d to %s (%s)", desc["step"], os.path.join(result.run_dir, "exports",
                                                                                 desc["file"]), desc["check"])
        return result

    def _run(self, dist: Dist) -> TrainResult:
        cfg, rank, world = self.cfg, dist.rank, dist.world_size
        der = self._der = derive(cfg, world)
        run_dir = resolve_run_dir(cfg)
        if rank == 0:
            os.makedirs(run_dir, exist_ok=True)
        control_dir = os.path.join(run_dir, ".hpclaunch")
        # handlers first: a SIGTERM during data loading / resume must not kill the rank outright
        stop = StopRequest(os.environ.get("HPCLAUNCH_REQUEUE_FLAG"), control_dir, min_interval_s=0.0)
        stop.install()
        try:
            result = self._run_installed(dist, der, run_dir, control_dir, stop)
        finally:
            stop.uninstall()
        # The last barrier, with the DDP wrapper gone (its cycles need the collector): while it lives,
        # the barrier's work can hold DDP's last gradient all-reduce, whose thread state keeps a
        # Python object; gloo's thread frees it later, perhaps during interpreter teardown: an
        # abort, exit 134 (docs/launch-modes.md).
        gc.collect()
        dist.barrier()
        return result

    def _run_installed(self, dist: Dist, der, run_dir: str, control_dir: str, stop: StopRequest) -> TrainResult:
        cfg, rank, world = self.cfg, dist.rank, dist.world_size
        device = dist.device

        # -- data --------------------------------------------------------------------------------
        data = load_data(cfg.data, cfg.label_column)
        tr_idx, va_idx = split(len(data.labels), cfg.val_fraction, cfg.seed)
        x_tr, y_tr = make_tensors(data, tr_idx)
        x_va, y_va = make_tensors(data, va_idx)
        self._val_batches = -(-len(val_shard(len(y_va), 0, world)) // VAL_BATCH)  # the same on every rank
        shard = torch.from_numpy(val_shard(len(y_va), rank, world))
        x_va, y_va = x_va[shard].to(device), y_va[shard].to(device)
        loader = TrainLoader(x_tr, y_tr, cfg.batch_size, rank, world, cfg.seed, workers=cfg.workers,
                             pin_memory=device.type == "cuda")
        bpe = loader.batches_per_epoch
        steps_per_epoch = bpe // der.accum_steps
        if steps_per_epoch == 0:
            raise ConfigError(f"one optimizer step needs {der.accum_steps} micro-batches but an epoch has only "
                              f"{bpe} per rank; lower --global-batch")
        total_steps = steps_per_epoch * cfg.epochs
        if cfg.max_steps is not None:
            total_steps = min(total_steps, cfg.max_steps)

        # -- model / optimizer / schedule / precision --------------------------------------------
        self.sharding = sharding = Sharding(cfg.zero, cfg.offload, dist, cfg.precision)
        torch.manual_seed(cfg.seed)  # same init on every rank (DDP/horovod broadcast anyway; FSDP2 shards it)
        model = sharding.shard(build_model(cfg.model, data.num_features, data.num_classes, cfg.hidden, cfg.dropout,
                                           cfg.model_size).to(device))
        # in every manifest: what `hpclaunch export` needs to rebuild the model and describe its input
        self._model_info = {"spec": cfg.model, "hidden": cfg.hidden, "dropout": cfg.dropout,
                            **({"size": cfg.model_size} if cfg.model == "transformer" else {}),
                            "in_features": data.num_features, "num_classes": data.num_classes,
                            "feature_names": data.feature_names, "classes": data.classes,
                            "data": cfg.data, "label_column": cfg.label_column, "precision": cfg.precision}
        torch.manual_seed(cfg.seed + rank)  # back to the per-rank stream (dropout)
        if cfg.optimizer == "adamw":
            opt = sharding.optimizer(model, torch.optim.AdamW, lr=der.lr, weight_decay=cfg.weight_decay)
        elif cfg.optimizer == "sgd":
            opt = sharding.optimizer(model, torch.optim.SGD, lr=der.lr, momentum=cfg.momentum,
                                     weight_decay=cfg.weight_decay)
        else:
            raise ConfigError(f"--optimizer must be adamw or sgd, got {cfg.optimizer!r}")
        opt = dist.wrap_optimizer(opt, model, der.accum_steps)  # horovod: before loading any state
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, total_steps, cfg.schedule))
        if cfg.precision == "fp16" and device.type != "cuda":
            raise ConfigError("--precision fp16 needs a CUDA device (GradScaler); use bf16 on CPU")
        amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.precision]
        scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "fp16")
        params = [p for p in model.parameters() if p.requires_grad]
        weights = [p.detach() for p in params]  # views: they follow the optimizer's in-place updates

        # -- resume ------------------------------------------------------------------------------
        store = ckpt.CheckpointStore(os.path.join(run_dir, "checkpoints"), cfg.keep_checkpoints, rank, dist.barrier)
        state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "ep_loss": 0.0, "ep_correct": 0.0, "ep_count": 0.0}
        resumed_from = None
        if rank == 0:
            store.clean_temp()
            if not cfg.resume:
                aside = store.start_new_lineage()
                if aside:
                    log.info("--no-resume: the checkpoints already here were moved to %s (a new run)", aside)
        dist.barrier()
        if cfg.resume:
            resumed_from = resume_newest(self.dist, store, model, opt, sched, scaler, state, stage=cfg.zero,
                                         global_batch=der.global_batch, accum_steps=der.accum_steps)

        dmodel = sharding.wrap(model)
        dist.broadcast_initial_state(model, opt)

        header = {"world_size": world, "local_rank": dist.local_rank, "host": socket.gethostname(),
                  "device": str(device), "backend": dist.backend, "launcher": dist.env.launcher,
                  "attempt": int(os.environ.get("HPCLAUNCH_ATTEMPT", "0") or 0),
                  "job_name": os.environ.get("HPCLAUNCH_JOB_NAME") or cfg.name,
                  "accum_steps": der.accum_steps, "global_batch": der.global_batch, "lr": der.lr,
                  "resumed_from": resumed_from, "resumed_step": state["step"],
                  "params": sum(p.numel() for p in model.parameters()),
                  "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "limits"}}
        mw = MetricsWriter(run_dir, rank, header, cfg.tensorboard, cfg.mlflow)
        self.store, self.model, self.opt, self.sched, self.scaler, self.state = store, model, opt, sched, scaler, state
        self.stop, self.mw, self.run_dir = stop, mw, run_dir

        last_ckpt = resumed_from
        self._inflight, self._commit_at = None, 0
        self._interval = checkpoint_interval(cfg, os.environ)   # seconds between checkpoints by time, or None
        self._mtbf = checkpoint_mtbf(cfg, os.environ)             # auto: retuned with the cost measured here
        self._saved_at, self._saves, self._costs = time.monotonic(), 0, []
        val = (None, None)
        self._iv = iv = [0, 0, 0.0, 0.0]  # since the last step record: steps, samples, busy seconds, loss sum
        self._last_lr = der.lr
        self._pending = None
        self._state_bytes = None  # parameters, gradients, optimizer state held here (at the first step)
        try:
            while state["epoch"] < cfg.epochs and state["step"] < total_steps:
                epoch = state["epoch"]
                dmodel.train()
                it = iter(loader.epoch(epoch, state["batch_in_epoch"]))
                while state["batch_in_epoch"] + der.accum_steps <= steps_per_epoch * der.accum_steps \
                        and state["step"] < total_steps:
                    t0 = time.perf_counter()
                    loss_sum = correct = None
                    n = 0
                    for j in range(der.accum_steps):
                        x, y = next(it)
                        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                        with sharding.no_sync(dmodel, j == der.accum_steps - 1):
                            with (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()):
                                out = dmodel(x)
                                loss = F.cross_entropy(out.float(), y)
                            scaler.scale(loss / der.accum_steps if der.accum_steps > 1 else loss).backward()
                        # stays on the device: one host sync per optimizer step (the .item() below)
                        ls, c = loss.detach() * len(y), (out.detach().argmax(1) == y).sum()
                        loss_sum, correct = (ls, c) if loss_sum is None else (loss_sum + ls, correct + c)
                        n += len(y)
                    dist.synchronize_grads(opt)
                    scaler.unscale_(opt)
                    log_now = (state["step"] + 1) % cfg.log_every == 0
                    # the norm is needed for clipping, or for this step's record (~0.1 ms: skip it otherwise)
                    gnorm = grad_norm_(params, cfg.clip_grad) if (cfg.clip_grad > 0 or log_now) else None
                    with dist.optimizer_step_context(opt):
                        scaler.step(opt)
                    scaler.update()
                    if self._state_bytes is None:  # gradients and optimizer state all exist now
                        self._state_bytes = sharding.state_bytes(model, opt)
                        mw.event("memory", step=state["step"] + 1, **memory_fields(self._state_bytes, device))
                    opt.zero_grad()  # horovod 0.28's optimizer takes no arguments; None grads are torch's default
                    self._last_lr = sched.get_last_lr()[0]
                    sched.step()
                    state["step"] += 1
                    state["batch_in_epoch"] += der.accum_steps
                    # the weights' L2 norm, in the same sync: NaN/inf once training has diverged (a NaN
                    # loss makes NaN gradients, then NaN weights). The weights are the same on every rank,
                    # so every rank stops at the same step. (The inf-norm is 7x slower on CPU.)
                    wnorm = plain(torch.nn.utils.get_total_norm(weights, 2.0)).float()
                    step_loss, step_correct, wnorm = torch.stack([loss_sum.float(), correct.float(), wnorm]).tolist()
                    if not math.isfinite(wnorm):
                        self._stop_diverged(step_loss / n, wnorm)
                    state["ep_loss"] += step_loss
                    state["ep_correct"] += step_correct
                    state["ep_count"] += n
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    dt = time.perf_counter() - t0
                    iv[0] += 1
                    iv[1] += n
                    iv[2] += dt
                    iv[3] += step_loss
                    if log_now:  # one record for the steps since the last one
                        self._record_steps(epoch, float(plain(gnorm)))

                    if self._inflight is not None and state["step"] >= self._commit_at:
                        self._inflight.commit(dist.any)
                    end_of_epoch = state["batch_in_epoch"] + der.accum_steps > steps_per_epoch * der.accum_steps \
                        or state["step"] >= total_steps
                    if end_of_epoch:
                        break    # checkpoint / stop check after validation, below
                    hook = cfg.stop_after_step is not None and state["step"] == cfg.stop_after_step
                    due = False
                    if state["step"] % max(1, cfg.stop_check_every) == 0 or hook:
                        stop, due = self._agree(hook)
                        if stop:
                            last_ckpt = self._save()
                            self._requeue_exit(last_ckpt)
                    if due or (cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0):
                        last_ckpt = self._save()

                # -- end of epoch (or of max_steps) -------------------------------------------
                del it
                self._record_steps(epoch)  # records cover every step and never span two epochs
                val = validate(self.dist, sharding.forward_module(dmodel), x_va, y_va, amp_dtype, device,
                               self._val_batches, VAL_BATCH)
                sharding.reshard(dmodel)
                tot = dist.sum([state["ep_loss"], state["ep_correct"], state["ep_count"]])
                mw.epoch(epoch, state["step"], tot[0] / max(tot[2], 1), tot[1] / max(tot[2], 1), val[0], val[1])
                if self._state_bytes is not None:
                    mw.event("memory", step=state["step"], epoch=epoch, **memory_fields(self._state_bytes, device))
                if rank == 0:
                    log.info("epoch %d step %d loss %.4f acc %.4f val_loss %s val_acc %s", epoch, state["step"],
                             tot[0] / max(tot[2], 1), tot[1] / max(tot[2], 1),
                             "-" if val[0] is None else f"{val[0]:.4f}", "-" if val[1] is None else f"{val[1]:.4f}")
                finished_epoch = state["batch_in_epoch"] + der.accum_steps > steps_per_epoch * der.accum_steps
                if finished_epoch:
                    state.update(epoch=epoch + 1, batch_in_epoch=0, ep_loss=0.0, ep_correct=0.0, ep_count=0.0)
                last_ckpt = self._save(val)
                done = state["epoch"] >= cfg.epochs or state["step"] >= total_steps
                hook = cfg.stop_after_step is not None and state["step"] == cfg.stop_after_step
                if not done and self._agree(hook, sync=True)[0]:
                    self._requeue_exit(last_ckpt)

            self._drain()
            self._complete_save()
            if rank == 0:
                write_finished(run_dir, {"step": state["step"], "epoch": state["epoch"], "time_unix": time.time(),
                                         "val_accuracy": val[1], "val_loss": val[0], "checkpoint": last_ckpt})
            return TrainResult("finished", state["step"], state["epoch"], val[1], val[0], run_dir, last_ckpt)
        finally:
            mw.close()

    # ------------------------------------------------------------------------------------------
    def _agree(self, local_hook: bool = False, sync: bool = False) -> tuple:
        """(stop, checkpoint due), the same on every rank. Stop: a requeue was asked for on some
        rank; due: rank 0's clock says the checkpoint interval has passed since the last save
        (docs/recovery.md). Between steps the agreement is pipelined: the flags sampled at one
        check are all-reduced without blocking and read at the next check (every rank runs the
        same sequence of checks, so they all act at the same step). At epoch ends and for the
        test hook it is synchronous."""
        local = self.stop.local()
        if local_hook and not local:   # test hook --stop-after-step: behave like a requeue request
            local, self.stop.reason = True, f"--stop-after-step {self.cfg.stop_after_step}"
        due = self._interval is not None and self.dist.rank == 0 and \
            time.monotonic() - self._saved_at >= self._interval
        earlier = (False, False)
        if self._pending is not None:
            (stop, was_due), saves = self.dist.flags_wait(self._pending[0]), self._pending[1]
            # a due flag sent before a save since is answered already (every rank saw that save)
            earlier, self._pending = (stop, was_due and saves == self._saves), None
        if sync or local_hook:
            now = self.dist.flags((local, due))
            return now[0] or earlier[0], now[1] or earlier[1]
        if not earlier[0]:
            self._pending = (self.dist.flags_start((local, due)), self._saves)
        return earlier

    def _drain(self) -> None:
        if self._pending is not None:
            self.dist.flags_wait(self._pending[0])
            self._pending = None

    def _record_steps(self, epoch: int, grad_norm: Optional[float] = None) -> None:
        """The step record for the steps since the last one (none if there were none); the grad
        norm is that of the last step, None where it was not computed (off the --log-every grid)."""
        iv = self._iv
        if iv[0]:
            self.mw.step(epoch, self.state["step"], iv[3] / iv[1], iv[1], iv[2] / iv[0], grad_norm, self._last_lr,
                         steps=iv[0])
            iv[:] = [0, 0, 0.0, 0.0]

    def _requeue_exit(self, path: str) -> None:
        code = requeue_exit_code()
        self._record_steps(self.state["epoch"])
        self._complete_save()  # the checkpoint to resume from is published before anyone exits
        if self.dist.rank == 0:
            self.stop.mark_served(self.state["step"])
            write_requeue_marker(self.run_dir, {"step": self.state["step"], "checkpoint": path,
                                                "reason": self.stop.reason, "time_unix": time.time()})
            log.warning("requeue requested (%s): checkpoint %s written at step %d; exiting %d",
                        self.stop.reason or "another rank", path, self.state["step"], code)
        self.mw.event("requeue", step=self.state["step"], epoch=self.state["epoch"], checkpoint=path,
                      reason=self.stop.reason)
        self.dist.barrier()
        raise RequeueExit(code)

    def _complete_save(self) -> None:
        """Collective: the checkpoint in flight (if any) committed and, on rank 0, published."""
        pending, self._inflight = self._inflight, None
        if pending is not None:
            pending.commit(self.dist.any)
            pending.wait(self.dist.any)

    def _stop_diverged(self, loss: float, wnorm: float) -> None:
        """Collective (every rank sees the same weights). Nothing from the diverged weights is
        saved. A checkpoint in flight is published if the step after it still went well (its step
        < this one - 1); one from the step just before is dropped: its weights are what diverged."""
        s, rank = self.state, self.dist.rank
        self._drain()
        pending, self._inflight = self._inflight, None
        if pending is not None and (pending.committed or pending.step < s["step"] - 1):
            self._inflight = pending
            self._complete_save()
        elif pending is not None:
            pending.abandon(self.dist.any)
        self.mw.event("diverged", step=s["step"], epoch=s["epoch"], loss=loss, weight_norm=wnorm)
        kept = f"last checkpoint kept: {self.store.latest_valid()[0] or 'none'}" if rank == 0 else \
            "rank 0 names the checkpoint kept"
        raise TrainingDiverged(f"training diverged at step {s['step']} (epoch {s['epoch']}): loss {loss:g} on rank "
                               f"{rank}, the weights' norm is {wnorm:g}; stopped without saving them ({kept}) "
                               f"\u2014 lower --lr (now {self._last_lr:g}) or set --clip-grad, and start afresh "
                               "with --no-resume")

    def _save(self, val=None) -> str:
        """Collective. Training stops only while the files are written into the page cache
        (the state is captured at this step); fsync and publishing run beside the next steps.
        ``val`` = (loss, accuracy) of the validation just run at this step, kept in the manifest."""
        t0 = time.perf_counter()
        try:
            return self._save_now(val)
        finally:
            # what training stopped for: the cadence (docs/recovery.md) weighs it against failures
            cost = time.perf_counter() - t0
            self._saved_at = time.monotonic()
            self._saves += 1
            if self.dist.rank == 0:
                self.mw.event("checkpoint", step=self.state["step"], seconds=round(cost, 4))
                if self._mtbf is not None:   # Daly's interval for this job's own cost (rank 0's clock decides)
                    self._costs = (self._costs + [cost])[-5:]
                    self._interval = daly_interval(sorted(self._costs)[len(self._costs) // 2], self._mtbf)

    def _save_now(self, val=None) -> str:
        self._complete_save()  # at most one in flight: checkpoints are published in step order
        s, rank, der = self.state, self.dist.rank, self._der
        # the epoch's running sums over every rank, which a resume at any world size shares out again
        tot = self.dist.sum([s["ep_loss"], s["ep_correct"], s["ep_count"]])
        st = {**s, "ep_loss": tot[0], "ep_correct": tot[1], "ep_count": tot[2], "ep_sums": "global"}
        meta = {"epoch": s["epoch"], "batch_in_epoch": s["batch_in_epoch"], "world_size": self.dist.world_size,
                "global_batch": der.global_batch, "accum_steps": der.accum_steps, "model": self._model_info}
        if self.cfg.zero:   # every rank its shard (DCP), no pickle: sharded_checkpoint.py
            shared, per_rank = sharded.save_payloads(self.model, self.opt, self.sched, self.scaler, st, rank,
                                                     self.cfg.zero)
            meta.update(format=sharded.FORMAT, zero=self.cfg.zero)
        else:
            shared = {"model.safetensors": ckpt.save_weights_payload(self.model),
                      "trainer.pt": ckpt.torch_bytes({"optimizer": self.opt.state_dict(),
                                                      "scheduler": self.sched.state_dict(),
                                                      "scaler": self.scaler.state_dict(), "state": st}),
                      } if rank == 0 else {}
            per_rank = {f"rng-rank{rank}.pt": ckpt.torch_bytes(ckpt.rng_state())}
        if val is not None and val[1] is not None:
            meta.update(val_loss=val[0], val_accuracy=val[1])
        if not self.cfg.async_checkpoint:
            return self.store.save(s["step"], shared, per_rank, meta, agree_failed=self.dist.any)
        self._inflight = self.store.begin(s["step"], shared, per_rank, meta)
        self._commit_at = s["step"] + COMMIT_AFTER_STEPS
        return self._inflight.final
