"""The monitor as a Prometheus exporter: ``--prometheus-port N`` and/or ``--prometheus-textfile PATH``.

Opt-in; ``prometheus_client`` (the ``[monitor]`` extra) is imported only when one is asked for. The
CSV logs stay the source of truth: the exporter shows the latest sample and nothing else, and none
of its failures stops the sampling.

Cheap on the sample path: :meth:`Exporter.update` stores a reference to the rows the daemon has just
written (one assignment); a scrape builds the metric families from them in the HTTP server's thread
(:class:`_Collector`). Textfile mode renders them once per sample and replaces the file atomically
(a temporary file in the same directory, then ``rename``), as node-exporter's textfile collector
requires; the file is removed when the monitor stops, so a finished job's series go away. The
textfile folder is often shared (group-writable or 1777, read by node-exporter's user): the
temporary file is made exclusively under a random name (hpclaunch/common/atomic.py), never
through a link another user planted there, and a link at the ``.prom`` name is replaced, not followed.

Port collision (two jobs' monitors on one node asking for the same port): the exporter takes the
next free port of ``PORT_TRIES``, says so in one stderr line and an event, and writes the port it
serves on to ``monitor/<host>.prometheus.port`` (removed when it stops); when all are taken it says
so once and goes on without an HTTP exporter. Names, labels and units: docs/monitor-logs.md, "Prometheus exporter".
"""

from __future__ import annotations

import errno
import os
import pwd
import time
from typing import Callable, Dict, Optional, Sequence

from hpclaunch.common.atomic import write_atomic

from . import schema

PORT_TRIES = 8          # the asked port and the next 7
LINGER_S = 3.0          # default --prometheus-linger
MAX_LINGER_S = 60.0
MIN_PORT, MAX_PORT = 1024, 65535
_MIB = 1048576.0

_JOB_LABELS = ("job_id", "job_name", "user", "node")
_GPU_LABELS = _JOB_LABELS + ("gpu", "uuid", "ranks")

# (metric name, type, help, CSV column, factor to the metric's unit)
GPU_METRICS = (
    ("hpclaunch_gpu_energy_joules_total", "counter",
     "GPU energy since the driver loaded (NVML total-energy counter)", "energy_mj", 1e-3),
    ("hpclaunch_gpu_power_watts", "gauge", "GPU board power", "power_w", 1.0),
    ("hpclaunch_gpu_power_limit_watts", "gauge", "enforced GPU power limit", "power_limit_w", 1.0),
    ("hpclaunch_gpu_temperature_celsius", "gauge", "GPU core temperature", "temp_c", 1.0),
    ("hpclaunch_gpu_memory_temperature_celsius", "gauge", "GPU memory (HBM) temperature", "mem_temp_c", 1.0),
    ("hpclaunch_gpu_memory_used_bytes", "gauge", "GPU memory in use", "mem_used_mib", _MIB),
    ("hpclaunch_gpu_memory_total_bytes", "gauge", "GPU memory in all", "mem_total_mib", _MIB),
    ("hpclaunch_gpu_utilization_ratio", "gauge", "GPU utilisation (NVML, coarse), 0-1", "util_pct", 0.01),
    ("hpclaunch_gpu_sm_clock_hertz", "gauge", "GPU SM clock", "sm_clock_mhz", 1e6),
    ("hpclaunch_gpu_xid_errors_total", "counter",
     "XID errors this GPU raised since the monitor started", "xid_count", 1.0),
    # the alert rule "near slowdown" compares the temperature with it (hpclaunch alerts prometheus-rules)
    ("hpclaunch_gpu_slowdown_temperature_celsius", "gauge", "temperature at which the GPU slows down (NVML)",
     "slowdown_temp_c", 1.0),
)
THROTTLE_METRIC = ("hpclaunch_gpu_throttle_seconds_total",
                   "time the GPU clocks were held down, by reason (NVML clocks-event counters)")
ERROR_METRIC = ("hpclaunch_gpu_sample_error", "1 when this GPU's latest sample failed (see the CSV error cell)")
HOST_METRICS = (
    ("hpclaunch_host_cpu_utilization_ratio", "gauge", "whole-host CPU utilisation over the last interval, 0-1",
     "cpu_pct", 0.01),
    ("hpclaunch_host_memory_used_bytes", "gauge", "host memory in use (total - available)", "mem_used_mib", _MIB),
    ("hpclaunch_host_memory_total_bytes", "gauge", "host memory in all", "mem_total_mib", _MIB),
    ("hpclaunch_host_load1", "gauge", "1-minute load average", "load1", 1.0),
    ("hpclaunch_host_rapl_energy_joules_total", "counter",
     "CPU package and DRAM energy (RAPL) since the monitor started", "rapl_energy_uj", 1e-6),
    ("hpclaunch_host_cpu_temperature_celsius", "gauge", "hottest CPU sensor", "cpu_temp_c", 1.0),
)
SAMPLE_TIME_METRIC = ("hpclaunch_monitor_last_sample_timestamp_seconds",
                      "time_unix of the sample these values come from (its rows in the CSV logs)")
SAMPLES_METRIC = ("hpclaunch_monitor_samples_total", "samples taken since the monitor started")

_GPU_COL = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}
_HOST_COL = {c: i for i, c in enumerate(schema.HOST_COLUMNS)}
# Cumulative counters the sampler reads only every few samples (monitors/nvml.py COUNTER_FIELDS): a
# scrape between two reads shows the last value read, so a counter series never disappears.
_HELD_GPU_COLS = tuple(_GPU_COL[c] for c in ("energy_mj", "throttle_hw_thermal_slowdown_ns",
                                             "throttle_hw_power_brake_slowdown_ns"))


# -- command line ---------------------------------------------------------------------------
def add_arguments(p) -> None:
    p.add_argument("--prometheus-port", type=int, default=None, metavar="N",
                   help=f"serve /metrics for Prometheus on port N ({MIN_PORT}-{MAX_PORT}); if it is taken, "
                   f"the next free one of {PORT_TRIES}, written to monitor/<host>.prometheus.port")
    p.add_argument("--prometheus-address", default="0.0.0.0", metavar="ADDR",
                   help="address the exporter listens on (default 0.0.0.0: every IPv4 interface)")
    p.add_argument("--prometheus-linger", type=float, default=LINGER_S, metavar="S",
                   help="on stop, serve the last sample (the counters' closing values) until one scrape "
                   f"has read it, for at most S seconds (default {LINGER_S:g}; 0: stop at once)")
    p.add_argument("--prometheus-textfile", default=None, metavar="PATH",
                   help="also write the metrics to PATH (*.prom) each sample, atomically, for "
                   "node-exporter's textfile collector; removed when the monitor stops")
    p.add_argument("--prometheus-textfile-dir", default=None, metavar="DIR",
                   help="as --prometheus-textfile, to DIR/hpclaunch_<job id>_<host>.prom: one file per job and "
                   "node, for a site whose node-exporter reads DIR (a profile's monitor.prometheus_textfile_dir)")


def check_arguments(p, a) -> None:
    """Bad values end the program through ``p.error`` (one line, exit 2)."""
    if a.prometheus_port is not None and not (MIN_PORT <= a.prometheus_port <= MAX_PORT):
        p.error(f"--prometheus-port {a.prometheus_port}: use a port from {MIN_PORT} to {MAX_PORT}")
    if not 0 <= a.prometheus_linger <= MAX_LINGER_S:
        p.error(f"--prometheus-linger {a.prometheus_linger:g}: use 0 to {MAX_LINGER_S:g} seconds")
    if a.prometheus_textfile is not None and a.prometheus_textfile_dir is not None:
        p.error("--prometheus-textfile and --prometheus-textfile-dir: give one of them")
    # A site's folder (the profile's) is not checked here: a node where it is not writable warns
    # and keeps its CSV logs, rather than losing the monitor to one bad node.
    if a.prometheus_textfile_dir is not None and not os.path.isabs(a.prometheus_textfile_dir):
        p.error(f"--prometheus-textfile-dir {a.prometheus_textfile_dir}: give an absolute path")
    path = a.prometheus_textfile
    if path is not None:
        folder = os.path.dirname(os.path.abspath(path))
        if not path.endswith(".prom"):
            p.error(f"--prometheus-textfile {path}: node-exporter's textfile collector reads only *.prom "
                    "files \u2014 give a name ending in .prom")
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
            p.error(f"--prometheus-textfile {path}: {folder} is not a directory this user can write "
                    "\u2014 use node-exporter's --collector.textfile.directory, or one you own")


def wanted(a) -> bool:
    return a.prometheus_port is not None or textfile_path(a, {}) is not None


def textfile_path(a, labels: Dict[str, str]) -> Optional[str]:
    """Where the textfile goes: --prometheus-textfile, else one file per job and node in
    --prometheus-textfile-dir (several jobs can share a node and its node-exporter)."""
    if a.prometheus_textfile is not None or a.prometheus_textfile_dir is None:
        return a.prometheus_textfile
    def plain(v):
        return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in v or "none")
    name = f"hpclaunch_{plain(labels.get('job_id'))}_{plain(labels.get('node'))}.prom"
    return os.path.join(a.prometheus_textfile_dir, name)


def job_labels(env, host: str) -> Dict[str, str]:
    """job_id, job_name, user, node: what every series carries. An array task is ``<job>_<task>``,
    as Slurm names it."""
    job = env.get("SLURM_JOB_ID", "")
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    user = env.get("SLURM_JOB_USER") or env.get("USER")
    if not user:
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = str(os.getuid())
    return {"job_id": job, "job_name": env.get("HPCLAUNCH_JOB_NAME") or env.get("SLURM_JOB_NAME", ""),
            "user": user, "node": host}


# -- the exporter ---------------------------------------------------------------------------
class Exporter:
    """Holds the latest sample; serves it over HTTP and/or writes it to a textfile.

    ``events`` has ``emit(kind, detail)``; ``say(line)`` writes one line to stderr.
    """

    def __init__(self, labels: Dict[str, str], events, say: Callable[[str], None]):
        from prometheus_client import CollectorRegistry  # noqa: WPS433 (lazy: the [monitor] extra)
        self.labels = labels
        self.job_values = [labels[k] for k in _JOB_LABELS]
        self.events = events
        self.say = say
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self.snapshot = None     # (time_unix, samples, host row or None, GPU rows)
        self.httpd = None
        self.port: Optional[int] = None
        self.port_file: Optional[str] = None
        self.textfile: Optional[str] = None
        self._textfile_failing = False
        self._held: Dict[tuple, float] = {}   # (gpu index, column) -> last value read
        self.served = None       # the snapshot the latest scrape read

    def serve(self, port: int, address: str, port_file: str) -> Optional[int]:
        """Listen on ``port``, or the next free one of PORT_TRIES; the port, or None."""
        from prometheus_client import start_http_server  # noqa: WPS433
        last = min(port + PORT_TRIES - 1, MAX_PORT)
        why = None
        for p in range(port, last + 1):
            try:
                self.httpd, _ = start_http_server(p, addr=address, registry=self.registry)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
                why = f"cannot listen on {address}:{p}: {e.strerror or e}"
                break
            self.port = p
            break
        if self.port is None:
            why = why or f"ports {port}-{last} are all in use on this node"
            self.say(f"prometheus: {why}; no exporter on this node, the CSV logs go on")
            self.events.emit("source_unavailable", {"source": "prometheus", "port": port, "reason": why})
            _remove(port_file)  # an earlier attempt's port is not this one's
            return None
        if self.port != port:
            self.say(f"prometheus: port {port} is in use; serving on {self.port} "
                     f"(written to {port_file})")
        try:
            write_atomic(port_file, f"{self.port}\n", mode=0o644, durable=False)
            self.port_file = port_file
        except OSError as e:
            self.say(f"prometheus: cannot write {port_file}: {e.strerror or e}")
        self.events.emit("source_available", {"source": "prometheus", "port": self.port, "asked_port": port,
                                              "address": address, "port_file": self.port_file})
        return self.port

    def _hold(self, row: tuple) -> tuple:
        """``row`` with each held counter's cell filled from its last read when this sample
        skipped it (an error row keeps its empty cells)."""
        if row[_GPU_COL["error"]]:
            return row
        fill = None
        for i in _HELD_GPU_COLS:
            key = (row[2], i)
            if row[i] is not None:
                self._held[key] = row[i]
            elif key in self._held:
                fill = fill or list(row)
                fill[i] = self._held[key]
        return tuple(fill) if fill else row

    def write_textfile_to(self, path: str) -> None:
        self.textfile = path
        self.events.emit("source_available", {"source": "prometheus_textfile", "path": path})

    def update(self, now: float, samples: int, host_row: Optional[tuple], gpu_rows: Sequence[tuple]) -> None:
        gpu_rows = [self._hold(r) for r in gpu_rows]
        self.snapshot = (now, samples, host_row, gpu_rows)  # one reference: a scrape sees a whole sample
        if self.textfile is not None:
            self._write_textfile()

    def _write_textfile(self) -> None:
        from prometheus_client import generate_latest  # noqa: WPS433 (cached after the first call)
        try:
            # 0644 despite the job's umask 077: node-exporter runs as another user.
            write_atomic(self.textfile, generate_latest(self.registry), mode=0o644, durable=False)
        except OSError as e:
            if not self._textfile_failing:
                self._textfile_failing = True
                self.say(f"prometheus: cannot write {self.textfile}: {e.strerror or e}; trying again each sample")
                self.events.emit("error", {"source": "prometheus_textfile", "path": self.textfile,
                                           "error": str(e)})
            return
        self._textfile_failing = False

    def linger(self, seconds: float, clock=time.monotonic, sleep=time.sleep) -> bool:
        """Keep serving until a scrape has read the latest snapshot (the monitor's final sample,
        with every counter read), for at most ``seconds``: without it a scraper never sees the
        energy of the job's last few seconds (the counter is read every few samples, and the
        exporter stops with the job). True if a scrape read it."""
        if self.httpd is None or self.snapshot is None:
            return False
        end = clock() + seconds
        while self.served is not self.snapshot:
            if clock() >= end:
                return False
            sleep(0.02)
        return True

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
            if self.port_file is not None:
                # a .port file names a live exporter (service discovery built on them must not
                # keep finished jobs as down targets); the events log keeps the port it served on
                _remove(self.port_file)
                self.port_file = None
        if self.textfile is not None:
            _remove(self.textfile)  # a finished job's series must not live on in node-exporter


class _Collector:
    """Builds the families from the latest snapshot at scrape time (the HTTP server's thread)."""

    def __init__(self, exporter: Exporter):
        self.x = exporter

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: WPS433
        snap = self.x.snapshot
        if snap is None:
            return
        self.x.served = snap  # read whole below: linger() waits for this
        now, samples, host, gpus = snap
        job = self.x.job_values
        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}
        fam = GaugeMetricFamily(*SAMPLE_TIME_METRIC, labels=_JOB_LABELS)
        fam.add_metric(job, now)
        yield fam
        fam = CounterMetricFamily(*SAMPLES_METRIC, labels=_JOB_LABELS)
        fam.add_metric(job, samples)
        yield fam
        if host is not None:
            for name, kind, help_text, col, factor in HOST_METRICS:
                v = host[_HOST_COL[col]]
                if v is not None:
                    fam = kinds[kind](name, help_text, labels=_JOB_LABELS)
                    fam.add_metric(job, v * factor)
                    yield fam
        if not gpus:
            return
        keys = [job + [str(r[2]), str(r[3]), str(r[4] or "")] for r in gpus]
        for name, kind, help_text, col, factor in GPU_METRICS:
            i = _GPU_COL[col]
            fam = kinds[kind](name, help_text, labels=_GPU_LABELS)
            for key, r in zip(keys, gpus):
                if r[i] is not None:
                    fam.add_metric(key, r[i] * factor)
            if fam.samples:
                yield fam
        fam = CounterMetricFamily(THROTTLE_METRIC[0], THROTTLE_METRIC[1], labels=_GPU_LABELS + ("reason",))
        for reason, col in schema.THROTTLE_COUNTER_COLUMNS.items():
            i = _GPU_COL[col]
            for key, r in zip(keys, gpus):
                if r[i] is not None:
                    fam.add_metric(key + [reason], r[i] * 1e-9)
        if fam.samples:
            yield fam
        fam = GaugeMetricFamily(ERROR_METRIC[0], ERROR_METRIC[1], labels=_GPU_LABELS)
        i = _GPU_COL["error"]
        for key, r in zip(keys, gpus):
            fam.add_metric(key, 1.0 if r[i] else 0.0)
        yield fam


# -- files ----------------------------------------------------------------------------------
def _remove(path: Optional[str]) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
