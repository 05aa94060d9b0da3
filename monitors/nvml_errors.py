"""NVML errors as one line of text, for the monitor's events (shared by nvml.py and xid.py)."""
from __future__ import annotations


def err_text(e: BaseException) -> str:
    """"NVMLError_NotSupported: Not Supported" (the class says which error; str() may fail)."""
    name = type(e).__name__
    try:
        msg = str(e)
    except Exception:
        msg = ""
    return f"{name}: {msg}" if msg else name
