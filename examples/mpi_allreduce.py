"""MPI check: every rank contributes rank+1 to an allreduce and prints the sum it got."""
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
expected = comm.Get_size() * (comm.Get_size() + 1) // 2
print(f"rank {comm.Get_rank()}/{comm.Get_size()} host {socket.gethostname()} sum {total} "
      f"{'ok' if total == expected else 'WRONG'}", flush=True)
