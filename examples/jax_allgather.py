"""JAX multi-process under `launcher: srun`: `jax.distributed.initialize()` with no arguments reads
Slurm's variables (JAX's own Slurm cluster detection); every process all-gathers its index and
checks that all agree on the sum.

Prints `process P/N host H sum S` per process; exit 0 if the gathered indexes are 0..N-1.
"""
import socket
import sys

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes


def main() -> int:
    jax.distributed.initialize()
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    me, n = jax.process_index(), jax.process_count()
    gathered = multihost_utils.process_allgather(jnp.array([me]))
    ranks = sorted(int(x) for x in gathered.ravel())
    total = sum(ranks)
    print(f"process {me}/{n} host {socket.gethostname()} sum {total}", flush=True)
    jax.distributed.shutdown()
    return 0 if ranks == list(range(n)) and total == n * (n - 1) // 2 else 3


if __name__ == "__main__":
    sys.exit(main())
