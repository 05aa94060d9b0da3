"""A small Horovod job for checking a launch (the Horovod twin of ddp_check.py).

Every rank starts from a *different* random model (seeded by its rank) and trains on different
data. `hvd.broadcast_parameters` must make the starting points equal and `hvd.DistributedOptimizer`
must average the gradients; at the end every rank allgathers all ranks' parameters and checks that
they are bit-identical.

Prints on every rank `rank R/W host H local L controller C` and `params identical: True|False`;
rank 0 also prints `rank hosts: 0=c1 1=c1 ...`. Exit status 0 only when the parameters are identical.

Runs under anything hvd.init() understands: horovodrun (gloo or MPI), mpirun, or
`srun --mpi=pmix` with a Horovod built with MPI.

  python hvd_check.py [--steps N] [--no-sync]

--no-sync is the negative control: a plain optimizer (no gradient averaging), so the parameters
drift apart and the check must print False.
"""
import argparse
import socket


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-sync", action="store_true", help="negative control: no gradient averaging")
    args = ap.parse_args()

    import torch
    import horovod.torch as hvd

    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    controller = "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "?"
    host = socket.gethostname()
    print(f"rank {rank}/{world} host {host} local {hvd.local_rank()} controller {controller}", flush=True)

    torch.manual_seed(rank)  # different starting points: broadcast_parameters must fix that
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * world, momentum=0.9)
    if not args.no_sync:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    gen = torch.Generator().manual_seed(1000 + rank)  # different data on every rank
    target = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))
    for step in range(args.steps):
        x = torch.randn(32, 16, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x @ target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    avg_loss = hvd.allreduce(loss.detach(), name="final_loss").item()

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0), name="params")  # [world, n]
    same = bool(all(torch.equal(gathered[r], gathered[0]) for r in range(world)))
    max_diff = (gathered - gathered[0]).abs().max().item()
    hosts = hvd.allgather_object(host, name="hosts")
    print(f"params identical: {same} (max abs diff {max_diff:.3g}; {args.steps} steps, mean final loss "
          f"{avg_loss:.4f})", flush=True)
    if rank == 0:
        print("rank hosts: " + " ".join(f"{r}={h}" for r, h in enumerate(hosts)), flush=True)
    hvd.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
