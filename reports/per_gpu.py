"""Every GPU's statistics and series from its indexed rows (reports/gpu_index.py), and the job's and
each node's peak GPU power: what the report computes per GPU, whether all the logs are in memory at
once (reports/document.py) or one node's at a time (reports/by_node.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hpclaunch.reports.gpu_index import gpu_rows
from hpclaunch.reports.gpu_stats import gpu_stats

PEAK_BINS = 2_000_000  # time bins of the job-level peak power at most (16 MB an array)


class PerGpu:
    """Every GPU's statistics and series, and the job's and each node's peak GPU power."""

    def __init__(self, keys, segs, fcols, txt, warnings: List[str]):
        self.keys, self.segs, self.fcols, self.txt, self.warnings = keys, segs, fcols, txt, warnings
        self.gpus: List[dict] = []
        self.series: Dict[str, Any] = {}
        self.duplicates = 0
        self.gpu_peak: Optional[float] = None
        self.node_peak: Dict[str, float] = {}

    def peak_step(self, recorded: Dict[str, float]) -> float:
        """Bin width for the job-level peak power: the sampling interval the daemons recorded (the
        longest, if hosts differ); estimated from a few GPUs' timestamps only without one."""
        gpu_hosts = {self.keys[g_][0] for g_ in self.segs}
        unrecorded = sorted(h for h in gpu_hosts if h not in recorded)
        if unrecorded:
            self.warnings.append(f"sampling interval not recorded for {', '.join(unrecorded[:5])}"
                                 f"{' and others' if len(unrecorded) > 5 else ''} (no events header with "
                                 "interval_s): estimated from the timestamps")
        probe = [recorded[h] for h in gpu_hosts if h in recorded] or self.first_intervals()
        return max((max(probe) if recorded and probe else float(np.median(probe))) if probe else 1.0, 1e-3)

    def first_intervals(self) -> List[float]:
        """The median sample spacing of the first 8 GPUs (their first file's rows): the estimate."""
        probe = []
        for g_ in list(self.segs)[:8]:
            fi, sl0 = self.segs[g_][0]
            tt = self.fcols[fi]["time_unix"][sl0]
            dt = np.diff(tt[np.isfinite(tt)]) if tt.size > 1 else np.empty(0)
            if dt.size and np.isfinite(np.median(dt)) and np.median(dt) > 0:
                probe.append(float(np.median(dt)))
        return probe

    def step_bins(self, t0: float, t1: float, recorded: Dict[str, float]) -> Tuple[float, int]:
        """(bin width, bins) of the job-level peak power: bins of the sampling interval, fewer and wider
        on a window of more than PEAK_BINS of them, so the arrays are bounded whatever the times say
        (the window is plausible: plausible.py)."""
        return self.bins_of(self.peak_step(recorded), t0, t1)

    @staticmethod
    def bins_of(step: float, t0: float, t1: float) -> Tuple[float, int]:
        step = max(step, (t1 - t0) / PEAK_BINS)
        return step, int(min(max((t1 - t0) / step, 1), PEAK_BINS)) + 1

    def run(self, t0: float, t1: float, bins: int, recorded: Dict[str, float],
            step_bins: Optional[Tuple[float, int]] = None) -> None:
        """Every GPU in key order; ``step_bins``: the peak power's bins, when the caller chose them (a
        report of one node at a time: the job's, not this node's). Leaves ``tot`` (the GPUs' summed
        mean power per bin) and ``marks`` (each GPU's key and its warnings' span in ``warnings``)."""
        step, nb = step_bins or self.step_bins(t0, t1, recorded)
        tot = self.tot = np.zeros(nb)
        per_host: Dict[str, np.ndarray] = {}
        self.marks: List[Tuple[Tuple[str, int], int, int]] = []
        for g_ in sorted(self.segs, key=lambda k: self.keys[k]):
            first = len(self.warnings)
            self._one(g_, t0, t1, bins, recorded, step, nb, tot, per_host)
            self.marks.append((self.keys[g_], first, len(self.warnings)))
        self.gpu_peak = float(tot.max()) if per_host else None
        self.node_peak = {h: float(v.max()) for h, v in per_host.items()}

    def _one(self, g_: int, t0: float, t1: float, bins: int, recorded: Dict[str, float], step: float, nb: int,
             tot: np.ndarray, per_host: Dict[str, np.ndarray]) -> None:
        host, idx = self.keys[g_]
        if idx < 0:
            self.warnings.append(f"{host}: {sum(self.fcols[fi]['time_unix'][sl].size for fi, sl in self.segs[g_])} "
                                 "rows without gpu_index ignored")
            return
        sl, ndup, nbad = gpu_rows(self.segs[g_], self.fcols)
        self.duplicates += ndup
        if nbad:
            self.warnings.append(f"{host}/gpu{idx}: {nbad} rows without time_unix ignored")
        if sl["time_unix"].size == 0:
            return
        gt = {c: self.txt[c].get(g_, {}) for c in self.txt}
        gs, ser = gpu_stats(host, idx, sl, gt, t0, t1, bins, self.warnings, recorded.get(host))
        self.gpus.append(gs)
        self.series[f"{host}/{idx}"] = ser
        m_ = binned_mean_power(sl, t0, step, nb)
        if m_ is not None:
            tot += m_
            if host not in per_host:
                per_host[host] = np.zeros(nb)
            per_host[host] += m_


def binned_mean_power(sl: Dict[str, np.ndarray], t0: float, step: float, nb: int) -> Optional[np.ndarray]:
    """One GPU's mean power per ``step``-wide bin from ``t0`` (0 where it has no sample)."""
    p = sl["power_w"]
    ok = ~np.isnan(p)
    if not ok.any():
        return None
    if ok.all():   # every row measured (usual): no copies of the rows
        ok, t = slice(None), sl["time_unix"]
    else:
        t = sl["time_unix"][ok]
    bi = np.clip((t - t0) / step, 0, nb - 1).astype(np.int64)
    s_ = np.bincount(bi, p[ok], nb)
    k_ = np.bincount(bi, None, nb)
    return np.where(k_ > 0, s_ / np.maximum(k_, 1), 0.0)
