"""A folder only this user can change: where hpclaunch keeps what it later trusts (ssh control
sockets, the user cache). It imports no `typing`: `hpclaunch --help` loads it."""
from __future__ import annotations

import os
import stat


def private_dir(path: str, open_bits: int = 0o077) -> str | None:
    """``path``, made 0700 (with its parents) if missing; None when it cannot be made or is not a
    private folder of ours: a link, another owner, or any of ``open_bits`` set in its mode."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & open_bits:
        return None
    return path
