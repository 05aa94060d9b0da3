"""Runs train_entry's CLI, printing how many DistributedDataParallel objects are alive when the
trainer tears the process group down (tests/train/test_ddp_digits.py)."""
import gc
import sys

from torch.nn.parallel import DistributedDataParallel as DDP

from hpclaunch.train_entry import dist_init

_shutdown = dist_init.Dist.shutdown


def shutdown(self):
    print("LIVE_DDP", sum(isinstance(o, DDP) for o in gc.get_objects()), flush=True)
    _shutdown(self)


dist_init.Dist.shutdown = shutdown
from hpclaunch.train_entry.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
