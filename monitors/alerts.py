"""Alert rules evaluated by the node monitor, on the rows it has just written (no extra process).

The job's rules come from ``<run dir>/.hpclaunch/alerts.json`` (the resolved `alerts:` section,
written at submission; docs/alerts.md); without it, or with ``enabled: false``, nothing here runs.
Each sample's GPU rows go through :meth:`AlertEngine.rows`: near the slowdown temperature, memory
use, idleness, hardware slowdown, power-cap time over a window; XIDs come from the monitor's own
``xid`` events (:meth:`on_event`), and the ranks' progress, out-of-memory messages and step times
from monitors/alert_ranks.py every few seconds.

One alert per condition per episode: a condition (a rule on one GPU, rank or XID code) that holds for
the rule's ``for_s`` raises one ``raised`` record; it is updated in memory while it lasts (last seen,
count, worst value) and, once the condition has stayed clear for ``resolve_after_s``, one ``resolved``
record closes the episode (also when the monitor stops: ``ended with the monitor``). Records go to
``alerts/node-<host>.jsonl`` and to the sender (monitors/alert_sinks.py), whose thread delivers them:
the sample loop only appends a line when an episode opens or closes.

Cost per sample: a few comparisons per GPU and rule while nothing is wrong (bench/monitor/bench_alerts.py
measures it against the same daemon without alerts).
"""

from __future__ import annotations

import json
import os
from collections import deque
from typing import Dict, List, Optional

from . import schema
from .alert_log import ALERTS_DIR, JsonLog, delivery_file, node_file, report_command

CONFIG_FILE = os.path.join(".hpclaunch", "alerts.json")
HW_SLOWDOWN_BITS = 0x8 | 0x40 | 0x80      # hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown
POWER_CAP_BIT = 0x4
MAX_XID_CODES = 64                        # distinct codes tracked per GPU

_C = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}
(_IDX, _UUID, _RANKS, _TEMP, _MEM_USED, _MEM_TOTAL, _UTIL, _REASONS, _SLOWDOWN, _CAP_NS, _VIOL_P, _HWT_NS,
 _HWP_NS) = (_C[c] for c in ("gpu_index", "gpu_uuid", "ranks", "temp_c", "mem_used_mib", "mem_total_mib", "util_pct",
                             "throttle_reasons", "slowdown_temp_c", "throttle_sw_power_cap_ns", "viol_power_ns",
                             "throttle_hw_thermal_slowdown_ns", "throttle_hw_power_brake_slowdown_ns"))


def load_config(run_dir: str) -> Optional[dict]:
    """The job's alert settings, from the run directory (a sweep task's: its job's), or None."""
    dirs = [run_dir]
    if os.path.basename(os.path.abspath(run_dir)).startswith("task"):
        dirs.append(os.path.dirname(os.path.abspath(run_dir)))
    for d in dirs:
        try:
            with open(os.path.join(d, CONFIG_FILE), encoding="utf-8") as f:
                conf = json.load(f)
        except (OSError, ValueError):
            continue
        return conf if isinstance(conf, dict) and conf.get("enabled") else None
    return None


class Track:
    """One condition's state: pending (``since``), raised (``rec``), clearing (``clear``)."""
    __slots__ = ("since", "clear", "rec", "active")

    def __init__(self):
        self.since = self.clear = self.rec = None
        self.active = False   # since or rec set: the only case a clear sample has work to do


class _Gpu:
    __slots__ = ("near", "mem", "idle", "hw", "cap", "cap_hist", "cap_last", "cap_ns", "hw_last", "xid", "where")

    def __init__(self, row):
        self.near, self.mem, self.idle, self.hw, self.cap = Track(), Track(), Track(), Track(), Track()
        self.cap_hist: deque = deque()   # (time, cumulative power-capped seconds) where the total changed
        self.cap_last = (0.0, False)     # the previous sample's time and power-cap bit
        self.cap_ns = -1                 # the power-cap counter as last seen (-1: never)
        self.hw_last: Dict[int, int] = {}
        self.xid: Dict[int, Track] = {}
        ranks = row[_RANKS] or ""
        self.where = {"gpu": row[_IDX], "uuid": row[_UUID], "ranks": ranks or None}


class AlertEngine:
    def __init__(self, conf: dict, host: str, run_dir: str, env=None, sender=None, on_error=None,
                 allocated: Optional[set] = None):
        env = os.environ if env is None else env
        self.conf, self.host = conf, host
        self.job_id = env.get("SLURM_ARRAY_JOB_ID") and f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}" \
            or env.get("SLURM_JOB_ID") or env.get("HPCLAUNCH_JOB_ID")
        self.job_name = env.get("HPCLAUNCH_JOB_NAME") or env.get("SLURM_JOB_NAME")
        self.report = report_command(self.job_id)
        self.resolve_s = float(conf.get("resolve_after_s", 60.0))
        rules = conf.get("rules") or {}
        self.rule = {name: r for name, r in rules.items() if isinstance(r, dict) and r.get("enabled", True)}
        self.log = JsonLog(os.path.join(run_dir, ALERTS_DIR, node_file(host)), on_error)
        self.sender = sender
        self.allocated = allocated
        self.gpus: Dict[int, _Gpu] = {}
        self.open: Dict[int, Track] = {}   # id(track) -> track, for the resolution sweep and close
        self._seq = 0
        self._xids: List[tuple] = []
        self._xid_seen: set = set()
        g = self.rule.get
        self.near_on, self.mem_on, self.idle_on = g("near_slowdown"), g("memory"), g("idle")
        self.hw_on, self.cap_on, self.xid_on = g("hw_slowdown"), g("power_cap"), g("xid")
        self.ranks = None  # alert_ranks.RankWatch, set by the daemon where ranks can be watched
        self.t_first: Optional[float] = None  # the first sample's time: a window is whole after it
        # The sample rules look at one sample every `evaluate_every_s` (5 s: as often as the monitor reads
        # the costly counters), XIDs at once: a rule's for_s and resolve_after_s count in those steps.
        self.every_s = max(0.0, float(conf.get("evaluate_every_s", 5.0)))
        self.next_eval = 0.0

    new_track = staticmethod(Track)

    @staticmethod
    def delivery_log_path(run_dir: str, host: str) -> str:
        return os.path.join(run_dir, ALERTS_DIR, delivery_file(node_file(host)))

    # -- records --------------------------------------------------------------------------
    def _write(self, rec: dict) -> None:
        self.log.append(rec)
        if self.sender is not None:
            self.sender.submit(rec)

    def hit(self, tr: Track, rule: str, now: float, where: dict, value, threshold, unit: str, message: str,
            for_s: float = 0.0) -> None:
        """The condition holds at ``now``: open its episode once it has held ``for_s``, else keep it open."""
        tr.clear = None
        rec = tr.rec
        if rec is not None:
            rec["last_seen"] = round(now, 3)
            rec["count"] += 1
            return
        if tr.since is None:
            tr.since = now
            tr.active = True
        if now - tr.since < for_s:
            return
        self._seq += 1
        rec = {"time_unix": round(now, 3), "id": f"{self.host}-{int(tr.since * 1000)}-{self._seq}",
               "event": "raised", "rule": rule, "severity": _severity(rule), "job_id": self.job_id,
               "job_name": self.job_name, "node": self.host, **where, "value": value, "threshold": threshold,
               "unit": unit, "first_seen": round(tr.since, 3), "last_seen": round(now, 3), "count": 1,
               "message": message, "report": self.report}
        tr.rec = rec
        self.open[id(tr)] = tr
        self._write(rec)

    def miss(self, tr: Track, now: float) -> None:
        """The condition is clear at ``now``: forget a pending one; resolve a raised one once clear long enough."""
        tr.since = None
        if tr.rec is None:
            tr.active = False
            return
        if tr.clear is None:
            tr.clear = now
        elif now - tr.clear >= self.resolve_s:
            self._resolve(tr, now, "cleared")

    def _resolve(self, tr: Track, now: float, why: str) -> None:
        rec = dict(tr.rec, time_unix=round(now, 3), event="resolved", resolved=why,
                   message=f"{tr.rec['message']} \u2014 resolved ({why})")
        tr.rec = tr.since = tr.clear = None
        tr.active = False
        self.open.pop(id(tr), None)
        self._write(rec)

    # -- inputs ---------------------------------------------------------------------------
    def on_event(self, kind: str, detail: dict, time_unix: float) -> None:
        """The monitor's events (monitors/logfiles.EventLog's listener): XIDs."""
        if kind == "xid" and self.xid_on:
            self._xids.append((detail.get("gpu_index"), detail.get("xid"), detail.get("uuid"), detail.get("ranks")))

    def rows(self, rows, now: float) -> None:
        """One sample's GPU rows (monitors/nvml.py's tuples): every ``evaluate_every_s``, or at once when
        the sample brought XIDs, the rules on them, then what is due (:meth:`tick`). Written for the case of
        nearly every evaluation, where nothing is wrong: per GPU and rule one or two comparisons, and a
        method call only for a condition that holds or an episode that is open."""
        if now < self.next_eval and not self._xids:
            return  # between evaluations: one comparison (at 1 Hz a sample's Python runs with cold caches)
        self.next_eval = now + self.every_s - min(0.05, self.every_s / 2)  # a little early, not a sample late
        near, mem, idle, hw, cap = self.near_on, self.mem_on, self.idle_on, self.hw_on, self.cap_on
        if self.t_first is None:
            self.t_first = now
        near_t = near["threshold"] if near else None
        mem_f = mem["threshold"] / 100.0 if mem else None
        idle_t = idle["threshold"] if idle else None
        gpus, allocated = self.gpus, self.allocated
        for row in rows:
            g = gpus.get(row[_IDX])
            if g is None:
                g = gpus[row[_IDX]] = _Gpu(row)
            if near_t is not None:
                t, sd = row[_TEMP], row[_SLOWDOWN]
                if t is not None and sd is not None and sd - t <= near_t:
                    self.hit(g.near, "near_slowdown", now, g.where, sd - t, near_t, " C",
                             f"GPU {row[_IDX]} on {self.host} at {t:g} C, within {sd - t:g} C of its slowdown "
                             f"temperature ({sd:g} C)", near["for_s"])
                elif g.near.active:
                    self.miss(g.near, now)
            if mem_f is not None:
                u, tot = row[_MEM_USED], row[_MEM_TOTAL]
                if u is not None and tot and u > mem_f * tot:
                    pct = round(100.0 * u / tot, 1)
                    self.hit(g.mem, "memory", now, g.where, pct, mem["threshold"], " %",
                             f"GPU {row[_IDX]} on {self.host}: memory {pct:g} % in use", mem["for_s"])
                elif g.mem.active:
                    self.miss(g.mem, now)
            if idle_t is not None:
                u = row[_UTIL]
                if u is not None and u <= idle_t and (allocated is None or row[_IDX] in allocated):
                    self.hit(g.idle, "idle", now, g.where, u, idle_t, " %",
                             f"GPU {row[_IDX]} on {self.host} idle ({u:g} % utilisation) while allocated",
                             idle["for_s"])
                elif g.idle.active:
                    self.miss(g.idle, now)
            if hw:  # the bits, or a counter read (every counter interval), or an open episode
                r = row[_REASONS]
                if (r and r & HW_SLOWDOWN_BITS) or row[_HWT_NS] is not None or row[_HWP_NS] is not None \
                        or g.hw.active:
                    self._hw(g, row, now, hw)
            if cap:  # only when the capped time grew, or an episode is open
                ns = row[_CAP_NS]
                if ns is None or ns != g.cap_ns or g.cap.active:
                    g.cap_ns = ns
                    self._cap(g, row, now, cap)
        if self._xids:
            self._xid(now)
        self.tick(now)

    def _hw(self, g: _Gpu, row, now: float, rule: dict) -> None:
        bits = (row[_REASONS] or 0) & HW_SLOWDOWN_BITS
        grew = False
        for col in (_HWT_NS, _HWP_NS):  # read every counter interval: they catch what fell between samples
            v = row[col]
            if v is not None:
                last = g.hw_last.get(col)
                g.hw_last[col] = v
                if last is not None and v > last:
                    grew = True
        if bits or grew:
            names = [n for b, n in schema.THROTTLE_REASONS.items() if bits & b] or ["hw_slowdown (counter)"]
            self.hit(g.hw, "hw_slowdown", now, g.where, ",".join(names), None, "",
                     f"GPU {row[_IDX]} on {self.host}: hardware slowdown ({', '.join(names)})", rule["for_s"])
        elif g.hw.active:
            self.miss(g.hw, now)

    def _cap(self, g: _Gpu, row, now: float, rule: dict) -> None:
        """Power-capped time over the last ``for_s``: the counter where there is one, else the bitmask's
        time sample by sample. The history keeps a point where the total changed (and the first), so a
        GPU that is never capped costs one comparison a sample."""
        ns = row[_CAP_NS] if row[_CAP_NS] is not None else row[_VIOL_P]
        hist = g.cap_hist
        if ns is not None:
            total = ns / 1e9
        elif hist:  # no counter: the bitmask's time (left-sample rule)
            total = hist[-1][1] + (now - g.cap_last[0] if g.cap_last[1] else 0.0)
        else:
            total = 0.0
        g.cap_last = (now, bool((row[_REASONS] or 0) & POWER_CAP_BIT))
        if hist and total == hist[-1][1]:
            if not g.cap.active:  # no more capped time: the share over the window cannot have grown
                return
        else:
            if hist and total < hist[-1][1]:  # a counter reset: start the window again
                hist.clear()
            hist.append((now, total))
        window = rule["for_s"]
        start = now - window
        while len(hist) > 1 and hist[1][0] <= start:
            hist.popleft()
        if now - self.t_first >= window * 0.99 and window > 0:
            pct = round(100.0 * (total - hist[0][1]) / window, 1)  # hist[0]: the total at the window's start
            if pct > rule["threshold"]:
                self.hit(g.cap, "power_cap", now, g.where, pct, rule["threshold"], " %",
                         f"GPU {row[_IDX]} on {self.host}: power cap held the clocks down {pct:g} % of the last "
                         f"{window:g} s")
                return
        if g.cap.active:
            self.miss(g.cap, now)

    def _xid(self, now: float) -> None:
        xids, self._xids = self._xids, []
        seen = set()
        for idx, code, uuid, ranks in xids:
            g = self.gpus.get(idx)
            table = g.xid if g is not None else self.gpus.setdefault(-1, _Gpu((None,) * len(schema.GPU_COLUMNS))).xid
            tr = table.get(code)
            if tr is None:
                if len(table) >= MAX_XID_CODES:
                    continue
                tr = table[code] = Track()
            where = g.where if g is not None else {"gpu": idx, "uuid": uuid, "ranks": ranks or None}
            self.hit(tr, "xid", now, where, code, None, "",
                     f"XID {code} on {self.host} GPU {idx}" + (f" (ranks {ranks})" if ranks else ""))
            seen.add(id(tr))
        self._xid_seen = seen

    def tick(self, now: float) -> None:
        """Once a sample, after the rows: episodes whose events stopped (XIDs) are resolved after the
        quiet time; the rank checks run when due."""
        if self.open:
            seen = self._xid_seen
            for g in self.gpus.values():
                for tr in g.xid.values():
                    if tr.rec is not None and id(tr) not in seen:
                        self.miss(tr, now)
            self._xid_seen = set()
        ranks = self.ranks
        if ranks is not None:
            if ranks.next_check is None:
                ranks.next_check = now + ranks.CHECK_S
            elif now >= ranks.next_check:
                ranks.check(self, now)

    def close(self, now: float, wait_s: float = 3.0) -> None:
        """The monitor stops: every open episode ends with it; the sender gets ``wait_s`` to deliver."""
        for tr in list(self.open.values()):
            self._resolve(tr, now, "ended with the monitor")
        if self.sender is not None:
            self.sender.close(wait_s)
        self.log.close()
        if self.sender is not None:
            self.sender.log.close()


_SEVERITY = {"xid": "critical", "hw_slowdown": "critical", "oom": "critical", "hang": "critical",
             "job_failed": "critical", "near_slowdown": "warning", "power_cap": "warning", "straggler": "warning",
             "memory": "warning", "idle": "warning", "job_completed": "info", "suggestions": "info"}


def _severity(rule: str) -> str:
    return _SEVERITY.get(rule, "warning")


def start_alerts(run_dir: str, host: str, env, events, say, allocated: Optional[set] = None,
                 node_id: Optional[int] = None) -> Optional[AlertEngine]:
    """The engine of the job's alerts for this node's monitor, listening to its events; None when the
    job has none. ``say``: a one-line message to the monitor's log (a sink's failure, once)."""
    conf = load_config(run_dir)
    if conf is None:
        return None
    from .alert_sinks import Senders, sinks_of
    sinks = sinks_of(conf, env)
    sender = None
    if sinks:
        rate = conf.get("rate_limit") or {}
        sender = Senders(sinks, JsonLog(AlertEngine.delivery_log_path(run_dir, host)), int(rate.get("max", 20)),
                         float(rate.get("per_s", 3600.0)), float(conf.get("timeout_s", 5.0)), on_error=say).start()
    engine = AlertEngine(conf, host, run_dir, env, sender, allocated=allocated)
    if any(engine.rule.get(r) for r in ("hang", "oom", "straggler")):
        from .alert_ranks import RankWatch
        if node_id is None:
            try:
                node_id = int(env.get("SLURM_NODEID", "0"))
            except ValueError:
                node_id = 0
        engine.ranks = RankWatch(run_dir, host, env.get("HPCLAUNCH_ATTEMPT"), node_id == 0, engine.rule)
    events.listener = engine.on_event
    return engine
