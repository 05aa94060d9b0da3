"""The per-node sampler daemon: ``python -m hpclaunch.monitors --run-dir DIR``.

Started once per node by the job script::

    srun --overlap --ntasks-per-node=1 python -m hpclaunch.monitors \\
         --interval 1 --run-dir "$HPCLAUNCH_RUN_DIR" --parent-pid $$ &

it writes ``DIR/monitor/<host>.{gpu,host,power_trace,jetson}.csv`` and
``<host>.events.jsonl`` (contract: ``monitors/schema.py``, docs/monitor-logs.md).
Sample ``k`` is taken at ``t0 + k * interval`` on the monotonic clock (no drift;
a slot missed because the node stalled is skipped and counted, not caught up).
It stops, flushing nothing because nothing is buffered, and exits 0 on SIGTERM,
SIGINT or SIGHUP, at ``--duration``, or when its parent is gone (``--parent-pid``
not running any more, or its own parent process changed: reparented to init).
It is a separate process: whatever happens to it, training goes on.
"""

from __future__ import annotations

import argparse
import errno
import gc
import os
import select
import signal
import sys
import time
from typing import List, Optional

from . import prometheus, schema
from .logfiles import CsvLog, EventLog, format_rows, format_trace_rows, stderr
from .parentwatch import ParentWatch

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PID_MAX = 1 << 22


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="hpclaunch-monitor", description=__doc__.split("\n")[0])
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--run-dir", default=os.environ.get("HPCLAUNCH_RUN_DIR"),
                   help="run directory; files go to RUN_DIR/monitor/ (default $HPCLAUNCH_RUN_DIR)")
    p.add_argument("--parent-pid", type=int, default=None,
                   help="exit when this process is gone (checked every interval)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--host", default=None, help="host name in file names and rows "
                   "(default $SLURMD_NODENAME, else the short host name)")
    p.add_argument("--gpus", default=None, help="the job's GPUs on this node, comma list of NVML "
                   "indices or UUIDs (default: SLURM_STEP_GPUS, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES)")
    p.add_argument("--tasks-per-node", type=int, default=None,
                   help="default $HPCLAUNCH_TASKS_PER_NODE, else $SLURM_NTASKS_PER_NODE")
    p.add_argument("--node-id", type=int, default=None, help="default $SLURM_NODEID, else 0")
    p.add_argument("--all-gpus", action="store_true",
                   help="also sample GPUs outside the job's allocation (their ranks cell is empty)")
    p.add_argument("--no-nvml", action="store_true", help="do not sample GPUs")
    p.add_argument("--no-power-trace", action="store_true",
                   help="do not drain the driver's buffered power samples")
    p.add_argument("--thermal-margin", type=float, default=5.0,
                   help="thermal_margin_low event when slowdown temperature - GPU temperature "
                   "falls below this many degrees C (default 5)")
    p.add_argument("--counter-interval", type=float, default=5.0,
                   help="seconds between reads of the cumulative counters that cost the driver most "
                   "(GPU energy, hardware thermal and power-brake time); also read at the first and "
                   "last sample; 0: every sample (default 5)")
    p.add_argument("--slow-interval", type=float, default=30.0,
                   help="seconds between reads of slow fields (ECC) (default 30)")
    p.add_argument("--sysfs-root", default="/sys", help="sysfs root for RAPL/hwmon/Jetson (tests)")
    prometheus.add_arguments(p)
    a = p.parse_args(argv)
    prometheus.check_arguments(p, a)
    if not a.run_dir:
        p.error("--run-dir is required (or set HPCLAUNCH_RUN_DIR)")
    # Bounded like the job file's monitor.interval; NaN fails every comparison, so `not (lo <= x <= hi)`.
    if not (0.05 <= a.interval <= 3600):
        p.error(f"--interval {a.interval!r}: use a number of seconds from 0.05 to 3600")
    if a.duration is not None and not (0 < a.duration <= 366 * 86400):
        p.error(f"--duration {a.duration!r}: use a finite number of seconds above 0")
    if not (0 <= a.counter_interval <= 3600):
        p.error(f"--counter-interval {a.counter_interval!r}: use a number of seconds from 0 to 3600")
    if not (0.05 <= a.slow_interval <= 86400):
        p.error(f"--slow-interval {a.slow_interval!r}: use a number of seconds from 0.05 to 86400")
    # 0 and -1 name no process (kill(0) is the process group, kill(-1) every process: a watch on
    # them never sees the parent go); pids stop at Linux's PID_MAX_LIMIT (2^22)
    if a.parent_pid is not None and not (1 <= a.parent_pid <= PID_MAX):
        p.error(f"--parent-pid {a.parent_pid}: give the pid of a running process (1 to {PID_MAX}); "
                "the monitor stops when it ends")
    if not (-1000 <= a.thermal_margin <= 1000):
        p.error(f"--thermal-margin {a.thermal_margin!r}: use a finite number of degrees C")
    monitor_dir = os.path.join(a.run_dir, schema.MONITOR_DIR)
    try:
        os.makedirs(monitor_dir, exist_ok=True)
        probe = os.path.join(monitor_dir, f".write-test-{os.getpid()}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as e:
        p.error(f"--run-dir {a.run_dir}: cannot write {monitor_dir}: {e.strerror or e} \u2014 "
                "give a run directory this user can write")
    return a


def host_name(arg: Optional[str] = None) -> str:
    # os.uname().nodename is what socket.gethostname() returns on Linux, without importing
    # socket (with its enums, selectors, array: several ms of the daemon's start-up).
    name = arg or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "host"


class Daemon:
    def __init__(self, args: argparse.Namespace, env=None, nvml_module=None):
        self.args = args
        self.env = os.environ if env is None else env
        self.host = host_name(args.host)
        self.dir = os.path.join(args.run_dir, schema.MONITOR_DIR)
        self._nvml_module = nvml_module
        self.events: Optional[EventLog] = None
        self.stop_reason: Optional[str] = None
        self.samples = 0
        self.skipped = 0
        self.max_late_s = 0.0
        self.max_work_s = 0.0
        self.stats: dict = {}
        self._errors_said: set = set()
        self._stderr_said = False
        self._rfd = self._wfd = None
        self._poll = None
        self._watch: Optional[ParentWatch] = None
        self.gpu_log = self.host_log = self.trace_log = self.jetson_log = self.ranks_log = None
        self.nvml = self.hostsrc = self.jetson = self.ranks = None
        self.exporter = None  # prometheus.Exporter when --prometheus-port/--prometheus-textfile
        self.alerts = None    # monitors/alerts.AlertEngine when the job has alert rules

    # -- files and errors ----------------------------------------------------------------
    def _on_write_error(self, path: str, e: OSError) -> None:
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        if not self._stderr_said:
            self._stderr_said = True
            stderr(f"{'disk full' if full else 'write failed'} writing {path}: {e}; "
                   "dropping samples until writes succeed again")
        if self.events is not None and path != self.events.path:
            self.events.emit("disk_full" if full else "error",
                             {"path": path, "errno": e.errno, "error": str(e),
                              "action": "dropping samples"})

    def _on_write_recovered(self, path: str, dropped: int, e: Optional[OSError]) -> None:
        # Says where the gap that disk_full / error announced ends, and how much it dropped.
        if self.events is not None:
            self.events.emit("disk_write_recovered", {
                "path": path, "dropped_writes": dropped,
                "errno": getattr(e, "errno", None), "error": str(e) if e is not None else None})

    def _csv(self, name: str, sch: str, cols, formatter=format_rows) -> CsvLog:
        log = CsvLog(os.path.join(self.dir, name), sch, cols, on_error=self._on_write_error,
                     on_recover=self._on_write_recovered, formatter=formatter)
        if log.moved_aside:
            self.events.emit("error", {"path": log.path, "error": "existing file has another "
                                       "schema or header", "moved_to": log.moved_aside})
        return log

    def source_error(self, source: str, e: BaseException) -> None:
        msg = f"{type(e).__name__}: {e}"
        if (source, msg) in self._errors_said:
            return
        self._errors_said.add((source, msg))
        import traceback  # only on an error: traceback brings linecache, tokenize, textwrap
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        self.events.emit("error", {"source": source, "error": msg, "traceback": "".join(tb[-3:])})
        stderr(f"{source}: {msg}")

    # -- set-up --------------------------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        os.makedirs(self.dir, exist_ok=True)
        self.events = EventLog(os.path.join(self.dir, schema.events_file(self.host)), self.host,
                               on_error=self._on_write_error, on_recover=self._on_write_recovered)
        env = self.env
        self.events.emit("header", {
            "schema": schema.EVENTS_SCHEMA,
            "schemas": {"gpu": schema.GPU_SCHEMA, "host": schema.HOST_SCHEMA,
                        "power_trace": schema.POWER_TRACE_SCHEMA, "jetson": schema.JETSON_SCHEMA,
                        "ranks": schema.RANKS_SCHEMA},
            "pid": os.getpid(), "ppid": os.getppid(), "parent_pid": a.parent_pid,
            "interval_s": a.interval, "counter_interval_s": a.counter_interval, "argv": sys.argv,
            "slurm_job_id": env.get("SLURM_JOB_ID"), "slurm_step_id": env.get("SLURM_STEP_ID"),
            "attempt": env.get("HPCLAUNCH_ATTEMPT"), "python": sys.version.split()[0]})
        if self.events.moved_aside:
            self.events.emit("error", {"path": self.events.path, "error": "not a regular file (a link?)",
                                       "moved_to": self.events.moved_aside})
        from .host import HostSampler
        from .rapl import RaplReader
        from .thermal import CpuTemp
        rapl = RaplReader(a.sysfs_root, events=self.events)
        self._guard("rapl", rapl.start)
        temp = CpuTemp(a.sysfs_root, events=self.events)
        self._guard("cpu_temp", temp.start)
        self.hostsrc = HostSampler(self.host, self.events, rapl if rapl.available else None,
                                   temp if temp.mode else None)
        self.hostsrc.start()
        self.host_log = self._csv(schema.host_file(self.host), schema.HOST_SCHEMA, schema.HOST_COLUMNS)
        if a.no_nvml:
            self.events.emit("source_unavailable", {"source": "nvml", "reason": "--no-nvml"})
        else:
            self._start_nvml()
        from .jetson import JetsonReader
        jet = JetsonReader(a.sysfs_root, events=self.events)
        if self._guard("jetson", jet.start):
            self.jetson = jet
            self.jetson_log = self._csv(schema.jetson_file(self.host), schema.JETSON_SCHEMA,
                                        schema.JETSON_COLUMNS)
        if prometheus.wanted(a):
            self._start_exporter()
        if env.get("HPCLAUNCH_LOG_DIR"):  # the job script's: this attempt's rank logs and ranks.tsv
            from .rank_progress import RankProgress
            names = (self.host, os.uname().nodename, os.uname().nodename.split(".")[0], env.get("SLURMD_NODENAME"))
            self.ranks = RankProgress(env["HPCLAUNCH_LOG_DIR"], self.host, names, env.get("HPCLAUNCH_ATTEMPT"))
            self.ranks_log = self._csv(schema.ranks_file(self.host), schema.RANKS_SCHEMA, schema.RANKS_COLUMNS)
        from .alerts import start_alerts
        allocated = {g.index for g in self.nvml.gpus if g.ranks} if self.nvml is not None and a.all_gpus else None
        self.alerts = self._guard("alerts", start_alerts, a.run_dir, self.host, env, self.events, stderr,
                                  allocated, a.node_id)

    def _start_exporter(self) -> None:
        """Never fatal: without prometheus_client, or without a free port, the CSV logs go on."""
        a = self.args
        try:
            x = prometheus.Exporter(prometheus.job_labels(self.env, self.host), self.events, stderr)
        except ImportError as e:
            stderr(f"prometheus: cannot import prometheus_client ({e}): pip install 'hpclaunch[monitor]'; "
                   "no exporter, the CSV logs go on")
            self.events.emit("source_unavailable", {"source": "prometheus", "reason": f"cannot import "
                                                    f"prometheus_client: {e}"})
            return
        if a.prometheus_port is not None:
            self._guard("prometheus", x.serve, a.prometheus_port, a.prometheus_address,
                        os.path.join(self.dir, schema.prometheus_port_file(self.host)))
        textfile = prometheus.textfile_path(a, x.labels)
        if textfile is not None:
            x.write_textfile_to(textfile)
        if x.httpd is not None or x.textfile is not None:  # else no one would read the samples
            self.exporter = x

    def _guard(self, source, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            self.source_error(source, e)
            return None

    def _start_nvml(self) -> None:
        from .nvml import NvmlSampler
        from .nvml_binding import load_pynvml
        from .ranks import gpu_rank_map
        a = self.args
        nv = self._nvml_module
        if nv is None:
            try:
                nv = load_pynvml()
            except Exception as e:  # ImportError, or a broken binding
                nv = None
                self.events.emit("source_unavailable", {
                    "source": "nvml", "reason": f"cannot import the NVML binding: {e}"})
                return
        def rank_map(devices):
            info = gpu_rank_map(devices, self.env, a.gpus, a.tasks_per_node, a.node_id, a.all_gpus)
            self.events.emit("source_available", {"source": "gpu_rank_map", **{
                k: v for k, v in info.items()}})
            return info
        s = NvmlSampler(nv, self.host, self.events, rank_map, margin_c=a.thermal_margin,
                        slow_every_s=a.slow_interval, power_trace=not a.no_power_trace,
                        counter_every_s=a.counter_interval)
        if self._guard("nvml", s.start):
            self.nvml = s
            self.gpu_log = self._csv(schema.gpu_file(self.host), schema.GPU_SCHEMA, schema.GPU_COLUMNS)

    # -- loop ----------------------------------------------------------------------------
    def _signals(self) -> None:
        try:
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._wfd, False)
            os.set_blocking(self._rfd, False)
            signal.set_wakeup_fd(self._wfd)
        except (ValueError, OSError):  # not the main thread: rely on the flag alone
            self._rfd = self._wfd = None
        if self._rfd is not None and hasattr(select, "poll"):  # one object for the whole run
            self._poll = select.poll()
            self._poll.register(self._rfd, select.POLLIN)
        for sig in _STOP_SIGNALS:
            try:
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass

    def _on_signal(self, signum, _frame) -> None:
        if self.stop_reason is None:
            self.stop_reason = signal.Signals(signum).name

    def _wait(self, seconds: float) -> None:
        if seconds <= 0 or self.stop_reason is not None:
            return
        if self._rfd is None:
            end = time.monotonic() + seconds
            while self.stop_reason is None and time.monotonic() < end:
                time.sleep(min(0.05, max(0.0, end - time.monotonic())))
            return
        if self._poll is not None:
            r = self._poll.poll(seconds * 1000.0)
            watch = self._watch
            if r and watch is not None and watch.registered:
                r = [(fd, ev) for fd, ev in r if not watch.ready(fd)]
        else:
            r, _, _ = select.select([self._rfd], [], [], seconds)
        if r:
            try:
                data = os.read(self._rfd, 64)
            except OSError:
                data = b""
            for b in data:
                if b in [int(s) for s in _STOP_SIGNALS] and self.stop_reason is None:
                    self.stop_reason = signal.Signals(b).name

    def tick(self, final: bool = False) -> None:
        """One sample of every source; ``final``: the last one, with every counter read, so the
        energy window closes on a counter value."""
        now = time.time()
        row = rows = None
        if self.hostsrc is not None:
            try:
                if self.exporter is None:  # the line made in one piece: no row to build and format
                    self.host_log.write_lines(self.hostsrc.line(now))
                else:
                    row = self.hostsrc.sample(now)
                    self.host_log.write_rows((row,))
            except Exception as e:
                self.source_error("host", e)
        if self.nvml is not None:
            try:
                rows = self.nvml.sample(now, counters=True if final else None)
                self.gpu_log.write_rows(rows)
            except Exception as e:
                self.source_error("nvml", e)
            try:
                trace = self.nvml.drain_power_samples()
                if trace:
                    if self.trace_log is None:
                        self.trace_log = self._csv(schema.power_trace_file(self.host),
                                                   schema.POWER_TRACE_SCHEMA,
                                                   schema.POWER_TRACE_COLUMNS, format_trace_rows)
                    self.trace_log.write_rows(trace)
            except Exception as e:
                self.source_error("power_trace", e)
        if self.jetson is not None:
            try:
                self.jetson_log.write_rows(self.jetson.sample(now, self.host))
            except Exception as e:
                self.source_error("jetson", e)
        if self.ranks is not None and (final or self.ranks.due(now)):
            self._sample_ranks(now)
        self.samples += 1
        if self.alerts is not None:  # on the rows just written; sending is the sender thread's
            try:
                self.alerts.rows(rows or (), now)
            except Exception as e:
                self.source_error("alerts", e)
        if self.exporter is not None:  # after the CSV writes: what a scrape shows is in the files
            try:
                self.exporter.update(now, self.samples, row, rows or ())
            except Exception as e:
                self.source_error("prometheus", e)

    def _sample_ranks(self, now: float) -> None:
        try:
            self.ranks_log.write_rows(self.ranks.sample(now))
        except Exception as e:
            self.source_error("ranks", e)

    def run(self) -> int:
        a = self.args
        self._signals()
        watch = self._watch = ParentWatch(a.parent_pid)
        watch.register(self._poll)
        self.setup()
        # What set-up made (modules, samplers, the alert rules) lives to the end: out of the collector's
        # walks, a full collection costs what the loop made, not every module the sources imported.
        gc.freeze()
        cpu0 = time.process_time()
        wall0 = time.monotonic()
        t0 = wall0
        k = 0
        # At 1 Hz each sample runs with cold caches, where every call costs several times its hot
        # price: the loop makes no call it can do without (the poll tells when a parent goes).
        polled = watch.event_driven
        interval = a.interval
        end = None if a.duration is None else a.duration - 1e-9
        monotonic = time.monotonic
        while self.stop_reason is None:
            if not polled or watch.exited or watch.reparented:
                gone = watch.gone()
                if gone:
                    self.stop_reason = gone
                    break
            start = monotonic()
            if start - (t0 + k * interval) > self.max_late_s:
                self.max_late_s = start - (t0 + k * interval)
            self.tick()
            done = monotonic()
            if done - start > self.max_work_s:
                self.max_work_s = done - start
            k += 1
            nxt = t0 + k * interval
            if done > nxt:  # overran one or more slots: skip them, keep the grid
                missed = int((done - nxt) // interval) + 1
                self.skipped += missed
                k += missed
                nxt = t0 + k * interval
            if end is not None and nxt - t0 >= end:
                self._wait(t0 + a.duration - monotonic())
                if self.stop_reason is None:
                    self.stop_reason = "duration"
                break
            self._wait(nxt - done)  # `done` is microseconds old: no clock read for the wait
        watch.close()
        if self.nvml is not None and self.samples:
            self.tick(final=True)
        elif self.ranks is not None and self.samples:
            self._sample_ranks(time.time())
        self.finish(cpu0, wall0)
        return 0

    def finish(self, cpu0=None, wall0=None) -> None:
        cpu1 = time.process_time()
        stats = {"samples": self.samples, "skipped_slots": self.skipped,
                 "interval_s": self.args.interval,
                 "max_late_s": round(self.max_late_s, 6), "max_work_s": round(self.max_work_s, 6),
                 "cpu_s_total": round(cpu1, 4)}
        if cpu0 is not None:
            loop_cpu = cpu1 - cpu0
            wall = time.monotonic() - wall0
            stats.update({
                "loop_cpu_s": round(loop_cpu, 4), "loop_wall_s": round(wall, 3),
                "cpu_s_per_sample": round(loop_cpu / self.samples, 7) if self.samples else None,
                "core_pct": round(100.0 * loop_cpu / wall, 4) if wall > 0 else None})
        try:
            if self.hostsrc is not None:
                _, rss = self.hostsrc.own_usage()
                stats["rss_mib"] = round(rss, 2) if rss is not None else None
        except Exception:
            pass
        if self.exporter is not None:
            try:
                self.exporter.linger(getattr(self.args, "prometheus_linger", 0.0))
                self.exporter.close()
            except Exception as e:
                self.source_error("prometheus", e)
        if self.alerts is not None:  # open episodes end with the monitor; the sender gets the linger's time
            try:
                self.alerts.close(time.time(), max(1.0, getattr(self.args, "prometheus_linger", 3.0)))
            except Exception as e:
                self.source_error("alerts", e)
        if self.nvml is not None:
            stats["gpus"] = len(self.nvml.gpus)
            try:
                self.nvml.close()
            except Exception:
                pass
        for log in (self.gpu_log, self.host_log, self.trace_log, self.jetson_log, self.ranks_log):
            dropped = getattr(log, "dropped_writes", 0)
            if dropped:
                stats.setdefault("dropped_writes", {})[os.path.basename(log.path)] = dropped
        self.stats = stats
        if self.events is not None:
            self.events.emit("monitor_stats", stats)
            self.events.emit("stopped", {"reason": self.stop_reason})
        for log in (self.gpu_log, self.host_log, self.trace_log, self.jetson_log, self.ranks_log, self.events):
            if log is not None:
                log.close()
        if self.hostsrc is not None:
            self.hostsrc.close()


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    d = Daemon(args)
    try:
        return d.run()
    except Exception as e:  # never a silent death: say why, then go
        stderr(f"crashed: {type(e).__name__}: {e}")
        import traceback
        traceback.print_exc()
        try:
            if d.events is not None:
                d.events.emit("error", {"source": "daemon", "error": f"{type(e).__name__}: {e}",
                                        "traceback": traceback.format_exc()[-2000:]})
                d.events.emit("stopped", {"reason": f"crash: {type(e).__name__}: {e}"})
        except Exception:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
