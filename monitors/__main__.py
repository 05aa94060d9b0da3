"""``python -m hpclaunch.monitors``: the per-node sampler daemon (see monitors/daemon.py)."""

import sys

from .daemon import main

sys.exit(main())
