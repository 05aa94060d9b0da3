"""Per-rank training metrics and the job's own description (job.yaml, state) for the report."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hpclaunch.reports import columnar, metrics_log, readers


def metrics_summary(run_dir, warnings, copies: Optional[columnar.Policy] = None) -> Optional[dict]:
    files = readers.metrics_files(run_dir)
    if not files:
        return None
    per_rank: Dict[int, dict] = {}
    all_step, all_loss, all_sps, all_t = [], [], [], []
    val: List[Tuple[float, float, Optional[float]]] = []
    bad_total = 0
    for f in files:
        m = re.match(r"rank(\d+)\.jsonl$", f.name)
        if not m:
            continue
        rank = int(m.group(1))
        a, bad = metrics_log.read_metrics_arrays(f, copies=copies)
        bad_total += bad
        st = a["is_step"]
        # a record stands for `steps` optimizer steps (train_entry --log-every N; absent: 1)
        covered = a["steps"][st] if "steps" in a else np.full(int(st.sum()), np.nan)
        nsteps = int(np.where(np.isnan(covered), 1.0, covered).sum())
        stt = a["step_time_s"][st]
        stt = stt[~np.isnan(stt)]
        smp = a["samples"][st]
        tt = a["time_unix"][st]
        tt = tt[~np.isnan(tt)]
        lo = a["loss"][st]
        lo_ok = lo[~np.isnan(lo)]
        per_rank[rank] = {
            "steps": nsteps,
            "samples": float(np.nansum(smp)) if nsteps and (~np.isnan(smp)).any() else None,
            "median_step_time_s": float(np.median(stt)) if stt.size else None,
            "mean_step_time_s": float(np.mean(stt)) if stt.size else None,
            "first_unix": float(tt.min()) if tt.size else None,
            "last_unix": float(tt.max()) if tt.size else None,
            "final_loss": float(lo_ok[-1]) if lo_ok.size else None,
            "memory": _memory(a),
        }
        sv = a["step"][st]
        okv = ~np.isnan(sv)
        all_step.append(sv[okv])
        all_loss.append(lo[okv])
        all_sps.append(a["samples_per_s"][st][okv])
        all_t.append(a["time_unix"][st][okv])
        ep = a["is_epoch"]
        for t_, vl, va in zip(a["time_unix"][ep].tolist(), a["val_loss"][ep].tolist(), a["val_accuracy"][ep].tolist()):
            if vl == vl:
                val.append((t_ if t_ == t_ else 0.0, vl, va if va == va else None))
    if bad_total:
        warnings.append(f"metrics: {bad_total} unparsable line(s) skipped (partial last lines?)")
    loss, tput = [], []
    if all_step:
        sv = np.concatenate(all_step)
        if sv.size:
            u, inv = np.unique(sv, return_inverse=True)
            lo = np.concatenate(all_loss)
            sp = np.concatenate(all_sps)
            ok = ~np.isnan(lo)
            ls = np.bincount(inv[ok], lo[ok], u.size)
            lk = np.bincount(inv[ok], None, u.size)
            ok2 = ~np.isnan(sp)
            ts = np.bincount(inv[ok2], sp[ok2], u.size)
            tk = np.bincount(inv[ok2], None, u.size)
            loss = [(int(s_), float(a_ / k_)) for s_, a_, k_ in zip(u.tolist(), ls.tolist(), lk.tolist()) if k_]
            tput = [(int(s_), float(a_)) for s_, a_, k_ in zip(u.tolist(), ts.tolist(), tk.tolist()) if k_]
    return {"per_rank": per_rank, "loss": loss, "throughput": tput, "val": sorted(val), "files": len(files)}


def _memory(a) -> Optional[dict]:
    """What the rank held, from its last ``memory`` record (train_entry): bytes of parameters,
    gradients and optimizer state (from the tensors), its peak resident memory and, on CUDA, the peak
    torch allocated; None for metrics without memory records (another trainer, an older one)."""
    mem = a.get("is_memory")
    if mem is None or not mem.any():
        return None
    last = int(np.flatnonzero(mem)[-1])

    def value(name, how="last"):
        col = a[name][mem] if how == "max" else a[name][last:last + 1]
        col = col[~np.isnan(col)]
        return float(col.max()) if col.size else None

    return {"state_bytes": value("state_bytes"), "params_bytes": value("params_bytes"),
            "grads_bytes": value("grads_bytes"), "optimizer_bytes": value("optimizer_bytes"),
            "peak_rss_bytes": value("peak_rss_bytes", "max"), "cuda_peak_bytes": value("cuda_peak_bytes", "max")}


# ---------------------------------------------------------------------------- job info


def job_info(run_dir: Path, warnings) -> dict:
    job: Dict[str, Any] = {"run_dir": str(run_dir), "id": None, "name": None}
    m = re.match(r"^(.*)-(\d+)$", run_dir.name)
    if m:
        job["name"], job["id"] = m.group(1), m.group(2)
    elif run_dir.name.startswith("task") and run_dir.parent.name:
        m2 = re.match(r"^(.*)-(\d+)$", run_dir.parent.name)
        if m2:
            job["name"], job["id"] = m2.group(1), f"{m2.group(2)}_{run_dir.name[4:]}"
    jy = run_dir / "job.yaml"
    if jy.is_file():
        try:
            import yaml  # launcher dependency
            d = yaml.safe_load(jy.read_text()) or {}
            if isinstance(d, dict):
                if d.get("name"):
                    job["name"] = str(d["name"])
                for k in ("job_id", "jobid", "id"):
                    if d.get(k) is not None:
                        job["id"] = str(d[k])
                        break
                res = d.get("resources") if isinstance(d.get("resources"), dict) else {}
                for k in ("user", "partition", "account"):
                    v = d.get(k) or res.get(k)
                    if v:
                        job[k] = str(v)
        except Exception as e:  # noqa: BLE001
            warnings.append(f"job.yaml unreadable: {e}")
    return job


# ---------------------------------------------------------------------------- build




def rank_hosts(run_dir) -> Dict[int, str]:
    """Rank -> host from the newest attempt's logs/attempt<N>/ranks.tsv ("rank<TAB>host<TAB>pid" per
    rank, written by the job script for every program, train_entry or not)."""
    logs = Path(run_dir) / "logs"
    try:
        attempts = sorted((p for p in logs.iterdir() if p.name.startswith("attempt") and p.name[7:].isdigit()),
                          key=lambda p: int(p.name[7:]), reverse=True)
    except OSError:
        return {}
    for a in attempts:
        try:
            text = (a / "ranks.tsv").read_text(errors="replace")
        except OSError:
            continue
        out: Dict[int, str] = {}
        for line in text.splitlines()[:100_000]:
            cols = line.split("\t")
            if len(cols) >= 2 and cols[0].isdigit():
                out[int(cols[0])] = cols[1][:255]
        if out:
            return out
    return {}
