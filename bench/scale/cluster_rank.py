"""One rank of bench_cluster_start.py's jobs: its start time first (before any import), then a small
collective, then its end time. ``cluster_rank.py MODE DIR``: MODE torch (gloo all-reduces of a
small tensor, under torchrun), mpi (an mpi4py reduction) or none (srun's plain ranks); DIR gets
rank<R> = "START HOST" and, at the end, "END ok|bad"."""
import time

T0 = time.time()
import os  # noqa: E402
import sys  # noqa: E402


def rank_of() -> int:
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def main() -> int:
    mode, folder = sys.argv[1], sys.argv[2]
    rank = rank_of()
    path = os.path.join(folder, f"rank{rank}")
    with open(path, "w") as f:
        f.write(f"{T0:.6f} {os.uname().nodename}\n")
    ok = True
    if mode == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        n = dist.get_world_size()
        x = torch.ones(8)
        for _ in range(3):
            dist.all_reduce(x)
        ok = bool((x == n ** 3).all())
        dist.destroy_process_group()
    elif mode == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        n = comm.Get_size()
        ok = comm.allreduce(comm.Get_rank() + 1) == n * (n + 1) // 2
    with open(path, "a") as f:
        f.write(f"{time.time():.6f} {'ok' if ok else 'bad'}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
