"""Slurm time and memory strings: parsing to numbers, without any Slurm installed."""
from __future__ import annotations

import re

TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"

# Whole strings (fullmatch), nothing stripped: a job's mem goes into its #SBATCH --mem line as
# written, where a trailing newline or space would break the header.
# Numbers are bounded in the pattern, before int(): Slurm keeps minutes and megabytes in 32 and
# 64 bits, and a 400-digit memory size overflowed float() (a traceback).
_TIME = re.compile(
    r"(?:(?P<days>\d{1,9})-(?P<dh>\d{1,9})(?::(?P<dm>\d{1,9})(?::(?P<ds>\d{1,9}))?)?"
    r"|(?P<a>\d{1,9})(?::(?P<b>\d{1,9})(?::(?P<c>\d{1,9}))?)?)"
)
_MEM = re.compile(r"(?P<n>\d{1,15})(?P<unit>[KMGTkmgt]?)")
_MEM_FACTOR = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_time_seconds(text: str) -> int:
    """Seconds in a Slurm time string; raises ValueError for anything Slurm would reject."""
    m = _TIME.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(text)
    g = m.groupdict()
    if g["days"] is not None:
        days, hours = int(g["days"]), int(g["dh"])
        minutes, seconds = int(g["dm"] or 0), int(g["ds"] or 0)
        if hours > 23 or minutes > 59 or seconds > 59:
            raise ValueError(text)
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    a, b, c = g["a"], g["b"], g["c"]
    if c is not None:  # HH:MM:SS
        hours, minutes, seconds = int(a), int(b), int(c)
        if minutes > 59 or seconds > 59:
            raise ValueError(text)
        return (hours * 60 + minutes) * 60 + seconds
    if b is not None:  # MM:SS
        if int(b) > 59:
            raise ValueError(text)
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def format_time(seconds: int) -> str:
    """The canonical D-HH:MM:SS / HH:MM:SS form Slurm prints."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    core = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{core}" if days else core


def parse_mem_mib(text: str) -> float:
    """MiB in a Slurm memory string (a bare number is MB, as Slurm reads it)."""
    m = _MEM.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(text)
    return int(m["n"]) * _MEM_FACTOR[m["unit"].upper()]
