"""A JAX program that survives a dead node or a hang (docs/recovery.md): `launcher: srun`, one process
a node. Least squares by gradient descent over a fixed data set, one shard a process, the gradients
gathered across processes every step; it checkpoints every $HPCLAUNCH_CHECKPOINT_INTERVAL_S seconds
(process 0's clock decides, every process agrees in the same gather), resumes from the newest
checkpoint in the run directory, and writes step records (what hang detection paces a rank by).

    python examples/resumable_jax.py [STEPS] [STEP_SECONDS]

Prints `final step N loss L w-sum S` on process 0 (the same digits after any number of restarts) and
writes $HPCLAUNCH_RUN_DIR/result.json.
"""
import glob
import json
import os
import sys
import time

import numpy as np

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")

from hpclaunch.train_entry.metrics import MetricsWriter  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
PAUSE = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1   # a step's compute stand-in
DIM, ROWS, LR = 64, 4096, 0.05


def save(folder: str, step: int, w: np.ndarray) -> None:
    tmp = os.path.join(folder, f".state-{step}.npz.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, w=w, step=step)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, f"state-{step}.npz"))
    for old in sorted(glob.glob(os.path.join(folder, "state-*.npz")), key=_step)[:-2]:
        os.unlink(old)


def _step(path: str) -> int:
    return int(os.path.basename(path)[6:-4])


def main() -> int:
    jax.distributed.initialize()
    from jax.experimental import multihost_utils

    me, n = jax.process_index(), jax.process_count()
    run_dir = os.environ.get("HPCLAUNCH_RUN_DIR", ".")
    folder = os.path.join(run_dir, "checkpoints-jax")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, DIM))
    y = x @ rng.standard_normal(DIM) + 0.01 * rng.standard_normal(ROWS)
    xs, ys = x[me::n], y[me::n]
    w, start = np.zeros(DIM), 0
    found = sorted(glob.glob(os.path.join(folder, "state-*.npz")), key=_step)
    if found:
        with np.load(found[-1]) as f:
            w, start = f["w"], int(f["step"])
    interval = float(os.environ.get("HPCLAUNCH_CHECKPOINT_INTERVAL_S") or 0) or None
    mw = MetricsWriter(run_dir, me, {"world_size": n, "attempt": int(os.environ.get("HPCLAUNCH_ATTEMPT", "0") or 0),
                                     "resumed_step": start, "source": "resumable_jax"}, tensorboard=False, mlflow=False)
    saved_at, t_rec, loss = time.monotonic(), time.perf_counter(), 0.0
    for step in range(start + 1, STEPS + 1):
        grad = xs.T @ (xs @ w - ys) / len(ys)
        due = 1.0 if me == 0 and interval and time.monotonic() - saved_at >= interval else 0.0
        gathered = np.asarray(multihost_utils.process_allgather(np.append(grad, due)))
        w = w - LR * gathered[:, :DIM].mean(axis=0)
        time.sleep(PAUSE)
        loss = float(np.mean((xs @ w - ys) ** 2))
        if step % 5 == 0:
            now = time.perf_counter()
            mw.step(0, step, loss, len(ys) * 5, (now - t_rec) / 5, None, LR, steps=5)
            t_rec = now
        if gathered[:, DIM].max() > 0:      # every process saw the same flag: one save, at one step
            c0 = time.perf_counter()
            if me == 0:
                save(folder, step, w)
                mw.event("checkpoint", step=step, seconds=round(time.perf_counter() - c0, 4))
            saved_at = time.monotonic()
    if me == 0:
        result = {"step": STEPS, "loss": round(loss, 12), "w_sum": round(float(w.sum()), 12)}
        with open(os.path.join(run_dir, "result.json.tmp"), "w") as f:
            json.dump(result, f)
        os.replace(os.path.join(run_dir, "result.json.tmp"), os.path.join(run_dir, "result.json"))
        print(f"final step {STEPS} loss {result['loss']} w-sum {result['w_sum']}", flush=True)
    mw.close()
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
