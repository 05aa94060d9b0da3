"""The host row: CPU utilisation, memory, load, RAPL energy, CPU temperature, and the
monitor's own CPU time and resident memory.

Two ways to read the same numbers:

* ``/proc`` fast path (Linux, the default where ``/proc/stat``, ``/proc/meminfo`` and
  ``/proc/self/statm`` open): the three files stay open and are re-read with one
  ``pread`` each per sample; CPU utilisation is computed exactly as psutil's
  ``cpu_percent`` does (busy = user+nice+system+irq+softirq+steal over the same plus
  idle+iowait, between two samples). On this project's test VM this costs about a
  quarter of the psutil calls (bench/monitor/bench_monitor.py).
* psutil (``fast=False``, or when ``/proc`` is not there): ``cpu_percent(interval=None)``,
  ``virtual_memory()``, ``Process().memory_info()``.

Either way the first row's ``cpu_pct`` is empty (there is no previous sample to compare
with), never a made-up 0; own CPU time is ``time.process_time()`` (ns resolution).
"""

from __future__ import annotations

import os
import time
from typing import Optional

from . import schema

_COL = {c: i for i, c in enumerate(schema.HOST_COLUMNS)}
_NCOL = len(schema.HOST_COLUMNS)
_MIB = 1048576.0


class HostSampler:
    name = "host"

    def __init__(self, host: str, events=None, rapl=None, cpu_temp=None, psutil_mod=None,
                 fast: bool = True, proc_root: str = "/proc"):
        self.host = host
        self.fast = fast
        self.proc_root = proc_root
        self._proc_fds = None
        self._last_cpu = None
        self.events = events
        self.rapl = rapl
        self.cpu_temp = cpu_temp
        self._ps = psutil_mod
        self._proc = None
        self._primed = False
        self.available = False
        self.reason: Optional[str] = None

    def start(self) -> bool:
        if self.fast:
            self._open_proc()
        ps = self._ps
        if ps is None and self._proc_fds is None:  # the /proc path needs no psutil (nor its import)
            try:
                import psutil as ps  # noqa: WPS433
            except ImportError as e:
                ps = None
                self.reason = f"psutil is not installed ({e}); only load and own CPU time are recorded"
        self._ps = ps
        if ps is not None and self._proc_fds is None:
            self._proc = ps.Process()
        self.available = True
        if self.events is not None:
            if self.reason and self._proc_fds is None:
                self.events.emit("source_unavailable", {"source": "psutil", "reason": self.reason})
            via = {"via": "/proc"} if self._proc_fds is not None else \
                {"via": "psutil", "psutil": getattr(ps, "__version__", None)}
            self.events.emit("source_available", {"source": self.name, **via})
        return True

    # -- /proc fast path -----------------------------------------------------------------
    def _open_proc(self) -> None:
        fds = []
        try:
            for name in ("stat", "meminfo", "self/statm"):
                fds.append(os.open(os.path.join(self.proc_root, name), os.O_RDONLY))
            self._proc_fds = tuple(fds)
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            for fd in fds:
                os.close(fd)
            self._proc_fds = None

    def _cpu_pct(self) -> Optional[float]:
        # The first line only ("cpu  user nice system idle iowait irq softirq steal ..."): 512 bytes
        # hold it even with every field at 20 digits.
        f = os.pread(self._proc_fds[0], 512, 0).split(b"\n", 1)[0].split()[1:9]
        if len(f) < 8:  # an old kernel without steal (or irq/softirq)
            f += [b"0"] * (8 - len(f))
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f)
        busy = user + nice + system + irq + softirq + steal
        total = busy + idle + iowait
        last, self._last_cpu = self._last_cpu, (total, busy)
        if last is None:
            return None
        dt = total - last[0]
        if dt <= 0:  # no clock tick in between: nothing measured (not 0 %)
            return None
        return round(min(100.0, max(0.0, 100.0 * (busy - last[1]) / dt)), 1)

    def _meminfo(self):
        """(MemTotal, MemAvailable) in bytes. The kernel lists them first and third (since Linux
        3.14); looked for by name all the same, the whole file only when they are not there."""
        head = os.pread(self._proc_fds[1], 256, 0).split(b"\n", 3)
        if len(head) > 3 and head[0].startswith(b"MemTotal:") and head[2].startswith(b"MemAvailable:"):
            return int(head[0].split()[1]) * 1024, int(head[2].split()[1]) * 1024
        total = avail = None
        for ln in os.pread(self._proc_fds[1], 8192, 0).split(b"\n"):
            if ln.startswith(b"MemTotal:"):
                total = int(ln.split()[1]) * 1024
            elif ln.startswith(b"MemAvailable:"):
                avail = int(ln.split()[1]) * 1024
                break
        return total, avail

    def _rss(self) -> float:
        return int(os.pread(self._proc_fds[2], 128, 0).split()[1]) * self._page / _MIB

    def close(self) -> None:
        if self._proc_fds is not None:
            for fd in self._proc_fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._proc_fds = None

    def sample(self, now: float) -> tuple:
        row = [None] * _NCOL
        row[0] = now
        row[1] = self.host
        ps = self._ps
        C = _COL
        if self._proc_fds is not None:
            row[C["cpu_pct"]] = self._cpu_pct()
            total, avail = self._meminfo()
            if total is not None:
                row[C["mem_total_mib"]] = total / _MIB
                if avail is not None:
                    row[C["mem_used_mib"]] = (total - avail) / _MIB
        elif ps is not None:
            pct = ps.cpu_percent(interval=None)
            row[C["cpu_pct"]] = pct if self._primed else None
            self._primed = True
            vm = ps.virtual_memory()
            row[C["mem_used_mib"]] = (vm.total - vm.available) / _MIB
            row[C["mem_total_mib"]] = vm.total / _MIB
        try:
            row[C["load1"]] = os.getloadavg()[0]
        except OSError:
            pass
        if self.rapl is not None:
            row[C["rapl_energy_uj"]] = self.rapl.read()
        if self.cpu_temp is not None:
            row[C["cpu_temp_c"]] = self.cpu_temp.read()
        cpu_s, rss = self.own_usage()
        row[C["monitor_cpu_s"]] = cpu_s
        row[C["monitor_rss_mib"]] = rss
        return tuple(row)

    def own_usage(self):
        """(cumulative CPU seconds user+system, RSS MiB) of this process."""
        cpu = time.process_time()  # user+system, ns resolution (psutil's is 10 ms ticks)
        if self._proc_fds is not None:
            return cpu, self._rss()
        if self._proc is not None:
            return cpu, self._proc.memory_info().rss / _MIB
        return cpu, None


def own_cpu_seconds() -> float:
    return time.process_time()

