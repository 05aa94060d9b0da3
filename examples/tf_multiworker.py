"""TensorFlow multi-worker training under `launcher: tensorflow`: hpclaunch gives each worker a
TF_CONFIG, so MultiWorkerMirroredStrategy() needs no arguments. A tiny two-layer model trains on
synthetic data in a custom loop (strategy.run; Keras 3's fit() cannot take a multi-worker
strategy's per-replica batches), each worker on its own data; each prints a checksum of its
variables, which must match on every worker (gradients were all-reduced).

Prints `worker I/N host H checksum C`.
"""
import json
import os
import socket
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    n = strategy.num_workers if hasattr(strategy, "num_workers") else strategy.num_replicas_in_sync
    rng = np.random.default_rng(task["index"])  # every worker its own data: only averaging makes them agree
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    init = np.random.default_rng(0)
    with strategy.scope():
        w1 = tf.Variable(init.normal(scale=0.3, size=(8, 16)).astype("float32"))
        w2 = tf.Variable(init.normal(scale=0.3, size=(16, 1)).astype("float32"))
        opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def step(xb, yb):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                logits = tf.nn.relu(xb @ w1) @ w2
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=yb, logits=logits))
            grads = tape.gradient(loss, [w1, w2])
            opt.apply_gradients(zip(grads, [w1, w2]))  # MultiWorkerMirrored all-reduces the gradients
            return loss
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(replica, args=(xb, yb)), axis=None)

    for _ in range(2):
        for i in range(0, len(x), 32):
            loss = step(tf.constant(x[i:i + 32]), tf.constant(y[i:i + 32]))
    checksum = float(np.abs(w1.numpy()).sum() + np.abs(w2.numpy()).sum())
    print(f"worker {task['index']}/{n} host {socket.gethostname()} loss {float(loss):.4f} checksum {checksum:.6f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
