"""What a rank holds in memory, for its metrics (``memory`` records; the report's per-rank memory view)."""
from __future__ import annotations

import resource
from typing import Optional

import torch


def _status_kib(field: str) -> Optional[int]:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM), or None where there is none."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_fields(state_bytes: dict, device: torch.device) -> dict:
    """Bytes of parameters, gradients and optimizer state this rank holds (from the tensors, at its
    first optimizer step), its resident and peak resident memory now, and on CUDA the peak and
    current memory torch allocated on its device."""
    rss, hwm = _status_kib("VmRSS"), _status_kib("VmHWM")
    out = {"params_bytes": state_bytes["params"], "grads_bytes": state_bytes["grads"],
           "optimizer_bytes": state_bytes["optimizer"], "state_bytes": sum(state_bytes.values()),
           "rss_bytes": rss * 1024 if rss is not None else None,
           "peak_rss_bytes": (hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    if device.type == "cuda":
        out.update(cuda_bytes=torch.cuda.memory_allocated(device), cuda_peak_bytes=torch.cuda.max_memory_allocated(device))
    return out
