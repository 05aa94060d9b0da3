"""What a submission asks the controller before queueing (`scontrol show config`, the partitions,
the nodes), kept a short while in the user cache so that back-to-back submissions start no
scontrol at all (three processes that competed for the CPU with the submission itself). It is
there for the budget "a 1,000-point sweep submits in <= 3x its floor" (bench/submit): a 200-point
sweep's submission on the test cluster took a median 139 ms of CPU with it and 158 ms without
(HPCLAUNCH_SLURM_FACTS_MAX_AGE=0), 7 interleaved rounds, wheel installs.

An entry is used only by the same user, for the same slurm.conf (path, inode, size, mtime: the
cluster's name, MaxArraySize and its partitions and nodes are defined there) and for at most
``max_age()`` seconds. It is trusted only to let a request through: a request the cached facts
would refuse is checked again against the live cluster (SlurmBackend.preflight), so a stale entry
can never refuse a job, and sbatch still checks every job it queues. The entry is the texts
themselves, separated by NUL (which scontrol never prints), in the private cache folder
(hpclaunch/common/usercache.py): nothing in it is run or unmarshalled.
"""
from __future__ import annotations

import os
import time
from typing import Optional

from hpclaunch.common import envknobs, usercache
from hpclaunch.common.identity import current_user

KINDS = ("config", "partition", "node")
DEFAULT_MAX_AGE_S = 300.0


# Entries kept: one per slurm.conf version (every edit makes a new one), the oldest go beyond this many.
CACHED_CONFS = 8


def max_age() -> float:
    """Seconds an entry is used for (HPCLAUNCH_SLURM_FACTS_MAX_AGE; 0 turns the cache off)."""
    return envknobs.number("HPCLAUNCH_SLURM_FACTS_MAX_AGE", DEFAULT_MAX_AGE_S, 0, 86400)


# An entry's bytes at most: `scontrol show node` of a 5,000-node cluster is ~3 MB (splitting that
# many bytes on NUL: a few ms, twice its size in memory).
MAX_ENTRY = 4 << 20


def _material() -> Optional[tuple]:
    """What an entry is valid for; None where there is no slurm.conf to key it on (configless
    clusters fetch their configuration from the controller: no cache there)."""
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        st = os.stat(conf)
    except OSError:
        return None
    return ("slurm-facts", current_user(), os.getuid(), os.path.abspath(conf), st.st_dev, st.st_ino,
            st.st_size, st.st_mtime_ns)


def _name(material: tuple) -> str:
    return f"slurm-facts-{usercache.key(*material)}"


def _text(material: tuple) -> str:
    return "\0".join(map(str, material))


def load() -> Optional[dict]:
    """{kind: scontrol's output} of a fresh entry, else None."""
    ttl = max_age()
    material = _material()
    if not ttl or material is None:
        return None
    raw = usercache.load(_name(material), _text(material), limit=MAX_ENTRY)
    if raw is None:
        return None
    try:
        made, *texts = raw.decode("utf-8", "surrogateescape").split("\0", len(KINDS))
        fresh = len(made) < 32 and 0 <= time.time() - float(made) <= ttl
    except ValueError:
        return None
    return dict(zip(KINDS, texts)) if fresh and len(texts) == len(KINDS) else None


def store(texts: dict) -> None:
    """Keep the live answers (every kind, each from a successful query)."""
    material = _material()
    if not max_age() or material is None or set(texts) != set(KINDS):
        return
    parts = [repr(time.time())] + [texts[k] for k in KINDS]
    if any("\0" in p for p in parts):
        return
    payload = "\0".join(parts).encode("utf-8", "surrogateescape")
    if usercache.store(_name(material), _text(material), payload, limit=MAX_ENTRY):
        usercache.prune("slurm-facts-", CACHED_CONFS)


def forget() -> None:
    """Drop the entry (the cluster answered otherwise than it said): the next submission asks live."""
    material = _material()
    if material is None:
        return
    folder = usercache.folder()
    if folder:
        try:
            os.unlink(os.path.join(folder, _name(material)))
        except OSError:
            pass
