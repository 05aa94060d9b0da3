"""Who runs hpclaunch: the user name the registry and Slurm queries use."""
from __future__ import annotations

import os


def current_user() -> str:
    """getpass.getuser()'s answer (the login variables, then the password database), without
    importing getpass and what it imports on every command."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        user = os.environ.get(name)
        if user:
            return user
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no passwd entry in some containers
        return str(os.getuid())
