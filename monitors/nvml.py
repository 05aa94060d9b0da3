"""NVIDIA GPUs through NVML: one row per GPU per interval, plus the driver's power samples.

The ``pynvml`` module (from ``nvidia-ml-py``) is a parameter of :class:`NvmlSampler`
so tests inject a fake; ``monitors/nvml_binding.py`` imports the real one lazily.

Per GPU and interval the sampler makes eight NVML calls: one
``nvmlDeviceGetFieldValues`` batch (instant power, 1 s average power, memory
temperature, the power perf-policy counter, which is the power violation counter
and the software power-cap time, and the cheap per-reason clocks-event times: sync
boost, software thermal slowdown), then temperature, memory, utilisation, two
clocks, enforced power limit and clocks-event (throttle) reasons.
``nvmlDeviceGetPowerUsage`` and ``nvmlDeviceGetViolationStatus`` only where the
batch lacks the field.

The cumulative counters that cost the driver most are read every
``counter_every_s`` (5 s) instead, and at the first and last sample: the total
energy counter, the thermal violation counter, and the hardware thermal and
power-brake clocks-event times (measured on an H100, driver 580: ~3.5 ms for the
energy counter, ~1 ms each for the other groups, against ~0.1 ms for any other
field; docs/benchmarks.md). A counter
read less often loses no total (the report takes its differences); between reads
its cells stay empty. Slowdown/shutdown thresholds are read once at start;
aggregate double-bit ECC every ``slow_every_s`` (30 s). It never lists processes
and never runs nvidia-smi. XID errors come from NVML's event API, one non-blocking
wait per sample for all GPUs together (``monitors/xid.py``).

A capability that answers NOT_SUPPORTED, NO_PERMISSION or FUNCTION_NOT_FOUND is
skipped from then on and said once (``source_unavailable`` event, with
``capability``); its cell stays empty. Any other NVMLError while sampling a GPU
gives that GPU a row with empty measurements and the reason in ``error``
(``nvml_error`` event when the error state changes); the other GPUs go on.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from . import power_trace, schema
from .nvml_errors import err_text
from .nvml_fields import (COUNTER_FIELDS, FI_MEMORY_TEMP, FI_PERF_POWER, FI_PERF_THERMAL, FI_POWER_AVERAGE,
                          FI_POWER_INSTANT, FI_TOTAL_ENERGY, REASON_FIELDS, THROTTLE_MASK, FIELD_NOT_THERE,
                          NOT_THERE)
from .nvml_batch import FieldBatch, PowerSamples
from .nvml_getters import Getters
from .xid import XidWatcher

_COL = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}
_NCOL = len(schema.GPU_COLUMNS)
_REASON_COL = {fid: _COL[schema.THROTTLE_COUNTER_COLUMNS[name]] for fid, name in REASON_FIELDS.items()}
# Where each field of the batch goes: a column (its value as read), or one of the values the
# sample goes on with (powers in mW, the energy counter, the two perf-policy counters).
_FIELD_COL = {FI_MEMORY_TEMP: _COL["mem_temp_c"]}
_FIELD_VAR = {FI_POWER_INSTANT: "power", FI_POWER_AVERAGE: "avg", FI_TOTAL_ENERGY: "energy",
              FI_PERF_THERMAL: "perf_thermal", FI_PERF_POWER: "perf_power"}
# Per field id, one lookup a sample: (reason column, its name, column, _FIELD_VAR name), None where none.
_FIELD_DEST = {fid: (_REASON_COL.get(fid), schema.GPU_COLUMNS[_REASON_COL[fid]] if fid in _REASON_COL else None,
                     _FIELD_COL.get(fid), _FIELD_VAR.get(fid)) for fid in {*_REASON_COL, *_FIELD_COL, *_FIELD_VAR}}
_NO_VALUES = [None] * (_NCOL - 5)  # a row's cells after time, host, index, uuid, ranks
(_POWER, _POWER_AVG, _ENERGY, _TEMP, _MEM_USED, _MEM_TOTAL, _UTIL, _MEM_UTIL, _SM_CLOCK, _MEM_CLOCK,
 _LIMIT, _REASONS, _SLOWDOWN, _SHUTDOWN, _ECC, _ERROR, _XID) = (_COL[c] for c in (
    "power_w", "power_avg_w", "energy_mj", "temp_c", "mem_used_mib", "mem_total_mib", "util_pct",
    "mem_util_pct", "sm_clock_mhz", "mem_clock_mhz", "power_limit_w", "throttle_reasons",
    "slowdown_temp_c", "shutdown_temp_c", "ecc_dbe_total", "error", "xid_count"))
# The violation counters: column, its index, batch field, _FIELD_VAR name, capability, perf policy.
_VIOLATIONS = tuple((col, _COL[col], fid, var, cap, policy) for col, fid, var, cap, policy in (
    ("viol_power_ns", FI_PERF_POWER, "perf_power", "violation_power", "NVML_PERF_POLICY_POWER"),
    ("viol_thermal_ns", FI_PERF_THERMAL, "perf_thermal", "violation_thermal", "NVML_PERF_POLICY_THERMAL")))


class _Gpu:
    __slots__ = ("index", "handle", "uuid", "ranks", "off", "fields", "field_set", "cheap_fields", "batch",
                 "cheap_batch", "last_energy", "throttle", "margin_low", "error", "trace_ts", "samples", "get", "slowdown",
                 "shutdown", "next_slow", "ecc", "last_ns", "next_counter")

    def __init__(self, index, handle, uuid, ranks):
        self.index = index
        self.handle = handle
        self.uuid = uuid
        self.ranks = ranks
        self.off: set = set()          # capabilities found missing
        self.fields: List[int] = []        # the batch's field ids, counters included
        self.field_set: frozenset = frozenset()  # the same, for the membership tests of each sample
        self.cheap_fields: List[int] = []  # the same less COUNTER_FIELDS: the batch between counter reads
        self.batch: Optional[FieldBatch] = None  # the two as requests
        self.cheap_batch: Optional[FieldBatch] = None
        self.last_energy: Optional[int] = None
        self.throttle = 0
        self.margin_low = False
        self.error: Optional[str] = None
        self.trace_ts = -1
        self.samples: Optional[PowerSamples] = None  # set by NvmlSampler.start
        self.get: Optional[Getters] = None
        self.slowdown = None
        self.shutdown = None
        self.next_slow = 0.0
        self.ecc = None
        self.last_ns: Dict[str, int] = {}  # column -> last value of a cumulative ns counter
        self.next_counter = 0.0            # time of the next read of COUNTER_FIELDS

    def set_fields(self, fields: List[int], nv) -> None:
        self.fields = fields
        self.field_set = frozenset(fields)
        self.cheap_fields = [f for f in fields if f not in COUNTER_FIELDS]
        self.batch, self.cheap_batch = FieldBatch(nv, self.handle, fields), FieldBatch(nv, self.handle, self.cheap_fields)


class NvmlSampler:
    """Samples the selected GPUs of this node. ``events`` has ``emit(kind, detail)``."""

    name = "nvml"

    def __init__(self, nvml, host: str, events, rank_map=None, margin_c: float = 5.0,
                 slow_every_s: float = 30.0, power_trace: bool = True, clock=time.time,
                 counter_every_s: float = 5.0):
        self.nv = nvml
        self.host = host
        self.events = events
        self.rank_map = rank_map  # callable([(index, uuid)]) -> {"selected": {index: ranks}, ...}
        self.margin_c = margin_c
        self.slow_every_s = slow_every_s
        self.counter_every_s = counter_every_s
        self.power_trace = power_trace
        self.clock = clock
        self.gpus: List[_Gpu] = []
        self.available = False
        self.reason: Optional[str] = None
        self.map_info: dict = {}
        self._initialised = False
        self.start_us = 0
        self.xid = None  # XidWatcher once started
        self._NVMLError = getattr(nvml, "NVMLError", Exception) if nvml is not None else Exception

    # -- set-up ------------------------------------------------------------------------
    def start(self) -> bool:
        nv = self.nv
        if nv is None:
            return self._unavailable("nvidia-ml-py (pynvml) is not installed")
        try:
            nv.nvmlInit()
            self._initialised = True
            count = nv.nvmlDeviceGetCount()
        except self._NVMLError as e:
            return self._unavailable(err_text(e))
        except Exception as e:  # a broken binding must not stop the other sources
            return self._unavailable(err_text(e))
        if count == 0:
            return self._unavailable("NVML reports no GPU on this node")
        devices = []
        handles = {}
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = nv.nvmlDeviceGetUUID(h)
                if isinstance(uuid, bytes):
                    uuid = uuid.decode("ascii", "replace")
            except self._NVMLError as e:
                self.events.emit("nvml_error", {"gpu_index": i, "error": err_text(e),
                                                "during": "enumeration"})
                continue
            devices.append((i, uuid))
            handles[i] = (h, uuid)
        info = self.rank_map(devices) if self.rank_map else \
            {"selected": {i: "" for i, _ in devices}, "gpus_from": "all NVML devices"}
        self.map_info = info
        self.start_us = int(self.clock() * 1e6)
        for idx, ranks in info["selected"].items():
            h, uuid = handles[idx]
            g = _Gpu(idx, h, uuid, ranks)
            g.samples, g.get = PowerSamples(nv, h), Getters(nv, h)
            self._probe(g)
            self.gpus.append(g)
        if not self.gpus:
            return self._unavailable("none of this node's GPUs is the job's "
                                     f"({info.get('gpus_from')}: {info.get('unmatched')})")
        self.available = True
        self.xid = XidWatcher(nv, self.events, self._NVMLError, self.name)
        xid_gpus = self.xid.start(self.gpus, self.clock())
        driver = None
        try:
            driver = nv.nvmlSystemGetDriverVersion()
            if isinstance(driver, bytes):
                driver = driver.decode()
        except Exception:
            pass
        self.events.emit("source_available", {
            "source": self.name, "driver": driver,
            "gpus": [{"index": g.index, "uuid": g.uuid, "ranks": g.ranks} for g in self.gpus],
            "fields": {g.index: g.fields for g in self.gpus}, "xid_events": xid_gpus})
        return True

    def _unavailable(self, reason: str) -> bool:
        self.available = False
        self.reason = reason
        self.events.emit("source_unavailable", {"source": self.name, "reason": reason})
        return False

    def _missing(self, g: _Gpu, cap: str, reason: str) -> None:
        if cap not in g.off:
            g.off.add(cap)
            self.events.emit("source_unavailable", {"source": self.name, "gpu_index": g.index,
                                                    "capability": cap, "reason": reason})

    def _call(self, g: _Gpu, cap: str, fn, *args):
        """``fn(*args)``; None if the capability is missing (said once)."""
        if cap in g.off:
            return None
        try:
            return fn(*args)
        except self._NVMLError as e:
            if getattr(e, "value", None) in NOT_THERE:
                self._missing(g, cap, err_text(e))
                return None
            raise
        except AttributeError as e:  # an old binding without the function
            self._missing(g, cap, err_text(e))
            return None

    def _field_error(self, code) -> str:
        try:
            return err_text(self._NVMLError(code))
        except Exception:
            return f"NVML return code {code}"

    def _missing_counters(self, g: _Gpu, fids, why: str) -> None:
        """Said once per GPU and counter; their cells stay empty and the report falls back to
        the bitmask for those reasons (the violation counters are read as before)."""
        names = [REASON_FIELDS[f] for f in fids if "counter:" + REASON_FIELDS[f] not in g.off]
        if not names:
            return
        g.off.update("counter:" + n for n in names)
        self.events.emit("source_unavailable", {
            "source": self.name, "gpu_index": g.index, "capability": "clocks_event_counters",
            "counters": names, "reason": why})

    def _probe(self, g: _Gpu) -> None:
        nv = self.nv
        want = [FI_POWER_INSTANT, FI_POWER_AVERAGE, FI_TOTAL_ENERGY, FI_MEMORY_TEMP, FI_PERF_THERMAL,
                *REASON_FIELDS]
        vals = None
        no_batch = "nvmlDeviceGetFieldValues is not available"
        if hasattr(nv, "nvmlDeviceGetFieldValues"):
            try:
                vals = self._call(g, "field_values", nv.nvmlDeviceGetFieldValues, g.handle, want)
            except self._NVMLError as e:
                self.events.emit("nvml_error", {"gpu_index": g.index, "error": err_text(e),
                                                "during": "field-value probe"})
                no_batch = f"the field-value probe failed ({err_text(e)})"
                vals = None
        else:
            self._missing(g, "field_values", "nvmlDeviceGetFieldValues not offered by the binding")
        absent: Dict[int, int] = {}
        if vals is not None:
            for fid, v in zip(want, vals):
                if v.nvmlReturn in FIELD_NOT_THERE:
                    absent[fid] = v.nvmlReturn
            # success, or a transient error: keep asking
            g.set_fields([fid for fid, v in zip(want, vals) if v.nvmlReturn not in FIELD_NOT_THERE], nv)
        names = {FI_POWER_INSTANT: ("power_instant", "instant power field not offered: "
                                    "power_w is nvmlDeviceGetPowerUsage"),
                 FI_POWER_AVERAGE: ("power_average", "1 s average power field not offered"),
                 FI_MEMORY_TEMP: ("mem_temp", "memory temperature field not offered")}
        for fid, (cap, why) in names.items():
            if fid not in g.fields:
                self._missing(g, cap, why)
        lacking = [f for f in REASON_FIELDS if f not in g.fields]
        if lacking:
            codes = sorted({absent[f] for f in lacking if f in absent})
            why = ("field values answered " + "; ".join(self._field_error(c) for c in codes)) if codes \
                else no_batch
            self._missing_counters(g, lacking, why + ": per-reason throttle time comes from the "
                                   "throttle_reasons bitmask")
        if FI_TOTAL_ENERGY not in g.fields:
            try:
                e = self._call(g, "energy_counter", g.get.energy_counter)
                if e is not None:
                    g.last_energy = int(e)
            except self._NVMLError:
                pass  # transient; sampled again each interval
        for cap, const in (("slowdown", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),
                           ("shutdown", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN")):
            try:
                v = self._call(g, cap + "_threshold", nv.nvmlDeviceGetTemperatureThreshold,
                               g.handle, getattr(nv, const))
            except self._NVMLError as e:
                self.events.emit("nvml_error", {"gpu_index": g.index, "error": err_text(e),
                                                "during": cap + " threshold"})
                v = None
            setattr(g, cap, v)

    # -- sampling ----------------------------------------------------------------------
    def sample(self, now: float, counters: Optional[bool] = None) -> List[tuple]:
        """One row per GPU. ``counters``: read COUNTER_FIELDS now (True), not (False), or when
        due (None: every ``counter_every_s``)."""
        rows = []
        xid = self.xid
        if xid is not None:
            xid.poll(now)  # first, so this sample's rows count the XIDs it reports
        for g in self.gpus:
            row = [now, self.host, g.index, g.uuid, g.ranks] + _NO_VALUES
            try:
                due = now >= g.next_counter if counters is None else counters
                if due:  # a little early rather than one interval late when the clock jitters
                    g.next_counter = now + self.counter_every_s - min(0.05, self.counter_every_s / 2)
                self._sample_gpu(g, row, now, due)
                if g.error is not None:
                    self.events.emit("nvml_error", {"gpu_index": g.index, "recovered": True,
                                                    "previous_error": g.error})
                    g.error = None
            except self._NVMLError as e:
                msg = err_text(e)
                row = [now, self.host, g.index, g.uuid, g.ranks] + _NO_VALUES
                row[_ERROR] = msg  # not the last column since the counters were appended
                if msg != g.error:
                    self.events.emit("nvml_error", {"gpu_index": g.index, "error": msg})
                g.error = msg
            if xid is not None:
                # from the event set, not the GPU: known in error rows too (XID 79 comes with them)
                row[_XID] = xid.count(g.index)
            rows.append(tuple(row))
        return rows

    def _read_fields(self, g: _Gpu, row: list, now: float, batch: FieldBatch) -> dict:
        """One nvmlDeviceGetFieldValues batch: columns filled in ``row``; returns the values the
        sample goes on with (``_FIELD_VAR`` names). A field the driver says is not there leaves
        the batch for good."""
        got: dict = {}
        vals = self._call(g, "field_values", batch.read)
        if vals is None:
            self._missing_counters(g, [f for f in g.fields if f in REASON_FIELDS],
                                   "nvmlDeviceGetFieldValues stopped answering")
            g.set_fields([], self.nv)
            return got
        bad = None
        for fid, (ret, x) in zip(batch.fields, vals):
            if ret:
                if ret in FIELD_NOT_THERE:
                    if bad is None:
                        bad = {}
                    bad[fid] = ret
                continue
            dest = _FIELD_DEST.get(fid)
            if dest is not None:
                reason_col, name, col, var = dest
                if reason_col is not None:
                    row[reason_col] = self._ns_counter(g, name, x, now)
                if col is not None:
                    row[col] = x
                if var is not None:
                    got[var] = x
        if bad:
            g.set_fields([f for f in g.fields if f not in bad], self.nv)
            gone = [f for f in bad if f in REASON_FIELDS]
            if gone:
                self._missing_counters(g, gone, "field values answered " + "; ".join(
                    sorted({self._field_error(bad[f]) for f in gone})))
        return got

    def _sample_gpu(self, g: _Gpu, row: list, now: float, counters: bool = True) -> None:
        nv = self.nv
        h = g.handle
        call = self._call
        get = g.get
        batch = g.batch if counters else g.cheap_batch
        got = self._read_fields(g, row, now, batch) if batch is not None and batch.fields else {}
        power = got.get("power")
        avg = got.get("avg")
        if power is not None:
            power /= 1000.0
        if avg is not None:
            avg /= 1000.0
        if power is None or (avg is None and FI_POWER_INSTANT in g.field_set):
            mw = call(g, "power_usage", get.power_usage)
            if mw is not None:
                if power is None:
                    power = mw / 1000.0
                else:
                    avg = mw / 1000.0  # on Ampere+ (not GA100) GetPowerUsage is the 1 s average
        row[_POWER] = power
        row[_POWER_AVG] = avg
        energy = got.get("energy")
        if energy is not None:
            energy = int(energy)
        elif counters and FI_TOTAL_ENERGY not in g.field_set:
            e = call(g, "energy_counter", get.energy_counter)
            energy = int(e) if e is not None else None
        if energy is not None:
            if g.last_energy is not None and energy < g.last_energy:
                self.events.emit("energy_counter_reset", {
                    "source": self.name, "gpu_index": g.index, "previous_mj": g.last_energy,
                    "now_mj": energy})
            g.last_energy = energy
        row[_ENERGY] = energy
        temp = row[_TEMP] = call(g, "temperature", get.temperature)
        mem = call(g, "memory", get.memory)
        if mem is not None:
            row[_MEM_USED] = mem.used / 1048576.0
            row[_MEM_TOTAL] = mem.total / 1048576.0
        util = call(g, "utilization", get.utilization)
        if util is not None:
            row[_UTIL] = util.gpu
            row[_MEM_UTIL] = util.memory
        row[_SM_CLOCK] = call(g, "sm_clock", get.sm_clock)
        row[_MEM_CLOCK] = call(g, "mem_clock", get.mem_clock)
        lim = call(g, "power_limit", get.power_limit)
        row[_LIMIT] = lim / 1000.0 if lim is not None else None
        reasons = None
        if "clocks_event_reasons" not in g.off:
            reasons = call(g, "clocks_event_reasons", get.clocks_event_reasons)
        if reasons is None:
            reasons = call(g, "throttle_reasons", get.throttle_reasons)
        row[_REASONS] = reasons
        if reasons is not None and int(reasons) & THROTTLE_MASK != g.throttle:
            self._throttle_events(g, int(reasons), now)
        # The violation counters are the perf-policy fields 74/75 of the batch; the function (about
        # ten times the cost of a field on an H100) only for a driver without them.
        for col, i, fid, var, cap, policy in _VIOLATIONS:
            value = got.get(var)
            if value is None and fid not in g.field_set:
                v = call(g, cap, nv.nvmlDeviceGetViolationStatus, h, getattr(nv, policy))
                value = v.violationTime if v is not None else None
            row[i] = self._ns_counter(g, col, value, now) if value is not None else None
        row[_SLOWDOWN] = g.slowdown
        row[_SHUTDOWN] = g.shutdown
        if now >= g.next_slow:
            g.next_slow = now + self.slow_every_s
            row[_ECC] = call(g, "ecc_dbe", nv.nvmlDeviceGetTotalEccErrors, h,
                             nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC)
        if temp is not None and g.slowdown is not None:
            margin = g.slowdown - temp
            if margin < self.margin_c and not g.margin_low:
                g.margin_low = True
                self.events.emit("thermal_margin_low", {
                    "gpu_index": g.index, "temp_c": temp, "slowdown_temp_c": g.slowdown,
                    "margin_c": margin, "threshold_c": self.margin_c}, now)
            elif g.margin_low and margin >= self.margin_c + 1.0:  # 1 degree hysteresis
                g.margin_low = False

    def _ns_counter(self, g: _Gpu, col: str, value, now: float) -> int:
        """A cumulative throttle-time value, logged as read; going backwards is an event
        (driver reload, GPU reset), and the report skips that interval."""
        x = int(value)
        last = g.last_ns.get(col)
        if last is not None and x < last:
            self.events.emit("throttle_counter_reset", {
                "source": self.name, "gpu_index": g.index, "counter": col,
                "previous_ns": last, "now_ns": x}, now)
        g.last_ns[col] = x
        return x

    def _throttle_events(self, g: _Gpu, reasons: int, now: float) -> None:
        cur = reasons & THROTTLE_MASK
        if cur == g.throttle:
            return
        started = cur & ~g.throttle
        ended = g.throttle & ~cur
        for bits, kind in ((ended, "throttle_stop"), (started, "throttle_start")):
            if bits:
                self.events.emit(kind, {
                    "gpu_index": g.index, "mask": bits,
                    "reasons": [n for b, n in schema.THROTTLE_REASONS.items() if bits & b],
                    "throttle_reasons": reasons}, now)
        g.throttle = cur

    def drain_power_samples(self) -> List[tuple]:
        """Rows ``(time s, host, gpu index, watts)`` of the driver's buffered power samples since
        the last call, in time order (monitors/power_trace.py)."""
        return power_trace.drain(self)

    def close(self) -> None:
        if self.xid is not None:
            self.xid.close()  # nvmlEventSetFree, before nvmlShutdown
            self.xid = None
        if self._initialised:
            try:
                self.nv.nvmlShutdown()
            except Exception:
                pass
            self._initialised = False
