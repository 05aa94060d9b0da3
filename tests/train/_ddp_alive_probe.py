"""Runs train_entry's CLI, printing how many DistributedDataParallel objects are alive at the last
barrier and when the trainer tears the process group down (tests/train/test_ddp_digits.py)."""
import gc
import sys

from torch.nn.parallel import DistributedDataParallel as DDP

from hpclaunch.train_entry import dist_init

_barrier, _shutdown = dist_init.Dist.barrier, dist_init.Dist.shutdown
_live_at_barrier = []


def _live() -> int:
    return sum(isinstance(o, DDP) for o in gc.get_objects())


def barrier(self):
    _live_at_barrier.append(_live())
    _barrier(self)


def shutdown(self):
    print("LIVE_DDP last_barrier", _live_at_barrier[-1] if _live_at_barrier else None, "shutdown", _live(),
          flush=True)
    _shutdown(self)


dist_init.Dist.barrier, dist_init.Dist.shutdown = barrier, shutdown
from hpclaunch.train_entry.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
