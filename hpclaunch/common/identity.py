"""Who runs hpclaunch: the user name the registry and Slurm queries use."""
from __future__ import annotations

import getpass
import os


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())
