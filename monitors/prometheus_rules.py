"""Prometheus alerting rules for the monitor's exporter metrics (monitors/prometheus.py), with the
thresholds of a job's `alerts:` section: the rules the node monitor evaluates itself, for a site that
scrapes its monitors and runs Alertmanager (``hpclaunch alerts prometheus-rules``, docs/alerts.md).

The sample rules only: XID, hardware slowdown, near the slowdown temperature, power-cap time, GPU
memory, idle GPUs. The rank rules (hang, out of memory, stragglers) and the job's states have no
exporter metric; they stay hpclaunch's. Label sets are the exporter's own, bounded: no rule adds one.
The file is plain YAML, written without a YAML library; every string is a JSON string, which YAML reads.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

GROUP = "hpclaunch-gpu"
_BY = "job_id, job_name, user, node, gpu, uuid, ranks"


def _duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s}s"


def rules(conf: Optional[dict]) -> List[Dict]:
    """The alerting rules (dicts: alert, expr, for, labels, annotations) of the enabled sample rules."""
    r = {k: v for k, v in ((conf or {}).get("rules") or {}).items() if isinstance(v, dict) and v.get("enabled", True)}
    out: List[Dict] = []

    def add(name: str, rule: str, severity: str, expr: str, for_s: float, summary: str, threshold=None) -> None:
        # a threshold rule says its value (the margin, the share); a rate of a counter would say an
        # extrapolated number that means nothing to the reader: the XID and slowdown rules leave it out
        value = f": value {{{{ $value }}}}, threshold {threshold:g}" if threshold is not None else ""
        out.append({"alert": name, "expr": expr, "for": _duration(for_s),
                    "labels": {"severity": severity, "hpclaunch_rule": rule},
                    "annotations": {"summary": summary,
                                    "description": "job {{ $labels.job_id }} ({{ $labels.job_name }}) of "
                                    "{{ $labels.user }} on {{ $labels.node }} GPU {{ $labels.gpu }} (ranks "
                                    "{{ $labels.ranks }})" + value + "; hpclaunch report {{ $labels.job_id }}"}})

    if "xid" in r:
        add("HpclaunchGpuXid", "xid", "critical", "increase(hpclaunch_gpu_xid_errors_total[5m]) > 0", 0,
            "a GPU reported an XID error")
    if "hw_slowdown" in r:
        add("HpclaunchGpuHardwareSlowdown", "hw_slowdown", "critical",
            'rate(hpclaunch_gpu_throttle_seconds_total{reason=~"hw_thermal_slowdown|hw_power_brake_slowdown"}[1m])'
            " > 0", r["hw_slowdown"].get("for_s", 0), "hardware thermal or power-brake slowdown")
    if "near_slowdown" in r:
        t = r["near_slowdown"]
        add("HpclaunchGpuNearSlowdown", "near_slowdown", "warning",
            f"hpclaunch_gpu_slowdown_temperature_celsius - hpclaunch_gpu_temperature_celsius <= {t['threshold']:g}",
            t["for_s"], f"a GPU within {t['threshold']:g} C of its slowdown temperature", t["threshold"])
    if "power_cap" in r:
        t = r["power_cap"]
        window = _duration(max(60.0, t["for_s"]))
        add("HpclaunchGpuPowerCapThrottling", "power_cap", "warning",
            f'100 * rate(hpclaunch_gpu_throttle_seconds_total{{reason="sw_power_cap"}}[{window}]) > {t["threshold"]:g}',
            0, f"power-cap throttling above {t['threshold']:g} % of the time", t["threshold"])
    if "memory" in r:
        t = r["memory"]
        add("HpclaunchGpuMemoryHigh", "memory", "warning",
            f"100 * hpclaunch_gpu_memory_used_bytes / hpclaunch_gpu_memory_total_bytes > {t['threshold']:g}",
            t["for_s"], f"GPU memory above {t['threshold']:g} %", t["threshold"])
    if "idle" in r:
        t = r["idle"]
        add("HpclaunchGpuIdle", "idle", "warning", f"100 * hpclaunch_gpu_utilization_ratio <= {t['threshold']:g}",
            t["for_s"], "an allocated GPU is idle", t["threshold"])
    return out


def _s(value) -> str:
    return json.dumps(value, ensure_ascii=True)


def to_yaml(rule_list: List[Dict], header: str = "") -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += ["groups:", f"  - name: {_s(GROUP)}", "    rules:"]
    for rule in rule_list:
        lines.append(f"      - alert: {_s(rule['alert'])}")
        lines.append(f"        expr: {_s(rule['expr'])}")
        lines.append(f"        for: {_s(rule['for'])}")
        for part in ("labels", "annotations"):
            lines.append(f"        {part}:")
            for k, v in rule[part].items():
                lines.append(f"          {k}: {_s(v)}")
    return "\n".join(lines) + "\n"


def names(rule_list: List[Dict]) -> List[Tuple[str, str]]:
    return [(r["alert"], r["labels"]["hpclaunch_rule"]) for r in rule_list]
