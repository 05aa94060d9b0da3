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
from .logfiles import cell, close_fds, format_rows

_COL = {c: i for i, c in enumerate(schema.HOST_COLUMNS)}
_NCOL = len(schema.HOST_COLUMNS)
# HostSampler._sample_proc builds its row in this order: a column added to the schema must go there too.
_PROC_ROW = ("time_unix", "host", "cpu_pct", "mem_used_mib", "mem_total_mib", "load1", "rapl_energy_uj",
             "cpu_temp_c", "monitor_cpu_s", "monitor_rss_mib")
assert schema.HOST_COLUMNS == _PROC_ROW, "monitors/host.py: _sample_proc's row order is not the schema's"
_MIB = 1048576.0


def _f3(v: float) -> str:
    """A float cell as format_rows writes it (``repr(round(v, 3))``), for the values below 1e12."""
    if -1e12 < v < 1e12:
        t = ("%.3f" % v).rstrip("0")
        return t + "0" if t[-1] == "." else t
    return cell(v)


class HostSampler:
    name = "host"

    def __init__(self, host: str, events=None, rapl=None, cpu_temp=None, psutil_mod=None,
                 fast: bool = True, proc_root: str = "/proc"):
        self.host = host
        self.host_cell = cell(host)  # the host name as its CSV cell, made once
        self.fast = fast
        self.proc_root = proc_root
        self._proc_fds = None
        self._lean = False  # line() by field positions (_usual_layout)
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
            self._lean = self._usual_layout(os.pread(fds[0], 512, 0), os.pread(fds[1], 256, 0))
        except (OSError, ValueError, AttributeError):
            for fd in fds:
                os.close(fd)
            self._proc_fds = None

    @staticmethod
    def _usual_layout(stat: bytes, meminfo: bytes) -> bool:
        """Whether line() may take fields by position: /proc/stat's first line has the 8 numbers
        through steal (Linux 2.6.11+), and /proc/meminfo lists MemTotal first and MemAvailable
        third, in kB (3.14+). Positions save a quarter of the row's Python work at 1 Hz."""
        f = stat.split(b"\n", 1)[0].split()
        m = meminfo.split(b"\n", 3)
        return (len(f) >= 9 and f[0] == b"cpu" and all(x.isdigit() for x in f[1:9]) and len(m) > 3
                and m[0].startswith(b"MemTotal:") and m[0].endswith(b" kB")
                and m[2].startswith(b"MemAvailable:") and m[2].endswith(b" kB"))

    def _cpu_pct(self, stat: bytes) -> Optional[float]:
        """From /proc/stat's first line, "cpu  user nice system idle iowait irq softirq steal ..."."""
        f = stat.split(b"\n", 1)[0].split()[1:9]
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

    def _meminfo(self, head: bytes):
        """(MemTotal, MemAvailable) in bytes. The kernel lists them first and third (since Linux
        3.14): ``head`` is the file's first bytes; the whole file is read only when they are not there."""
        lines = head.split(b"\n", 3)
        if len(lines) > 3 and lines[0].startswith(b"MemTotal:") and lines[2].startswith(b"MemAvailable:"):
            return int(lines[0].split()[1]) * 1024, int(lines[2].split()[1]) * 1024
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
            self._proc_fds = close_fds(*self._proc_fds)

    def sample(self, now: float) -> tuple:
        if self._proc_fds is not None:
            return self._sample_proc(now)
        row = [None] * _NCOL
        row[0] = now
        row[1] = self.host
        ps = self._ps
        C = _COL
        if ps is not None:
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

    def _sample_proc(self, now: float) -> tuple:
        """The /proc path in one piece: at 1 Hz every call runs with cold caches, where each
        Python call and lookup costs several times its hot price (the kernel's side, generating
        /proc/stat and /proc/meminfo, is about half of what is left)."""
        pread = os.pread
        stat_fd, mem_fd, statm_fd = self._proc_fds
        pct = self._cpu_pct(pread(stat_fd, 512, 0))  # 512 bytes hold the first line at 20 digits a field
        total, avail = self._meminfo(pread(mem_fd, 256, 0))
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
        rapl = self.rapl.read() if self.rapl is not None else None
        temp = self.cpu_temp.read() if self.cpu_temp is not None else None
        cpu_s = time.process_time()  # user+system, ns resolution (psutil's is 10 ms ticks)
        rss = int(pread(statm_fd, 128, 0).split(None, 2)[1]) * self._page / _MIB
        return (now, self.host, pct,
                (total - avail) / _MIB if total is not None and avail is not None else None,
                total / _MIB if total is not None else None,
                load, rapl, temp, cpu_s, rss)

    def line(self, now: float) -> str:
        """The host row as its CSV line: the text ``format_rows((self.sample(now),))`` gives, made
        in one piece on the usual /proc layout. At 1 Hz every sample runs with cold caches, where each
        Python call, lookup and per-cell dispatch costs several times its hot price: building
        the row, then formatting it cell by cell, was half of a host-only daemon's Python work
        (bench/monitor). The daemon writes this unless it also serves the row to Prometheus."""
        fds = self._proc_fds
        if fds is not None and self._lean:
            pread = os.pread
            try:  # the layout _open_proc saw (a kernel's never changes): fields by position
                f = pread(fds[0], 512, 0).split(None, 9)  # "cpu", then the first line's numbers
                idle = int(f[4]) + int(f[5])  # idle + iowait: not busy, as psutil counts them
                tot = int(f[1]) + int(f[2]) + int(f[3]) + idle + int(f[6]) + int(f[7]) + int(f[8])
                m = pread(fds[1], 256, 0).split(b"\n", 3)
                total, avail = int(m[0][9:-3]), int(m[2][13:-3])  # "MemTotal:   N kB", "MemAvailable: N kB"
            except (ValueError, IndexError):  # not that layout after all: the general path from now on
                self._lean = False
                return format_rows((self.sample(now),))
            busy = tot - idle
            last, self._last_cpu = self._last_cpu, (tot, busy)
            if last is None or tot <= last[0]:
                pct = ""
            else:
                p = 100.0 * (busy - last[1]) / (tot - last[0])
                pct = "%.1f" % (p if 0.0 <= p <= 100.0 else (0.0 if p < 0.0 else 100.0))
            try:
                load = _f3(os.getloadavg()[0])
            except OSError:
                load = ""
            rapl = self.rapl.read() if self.rapl is not None else None
            temp = self.cpu_temp.read() if self.cpu_temp is not None else None
            cpu_s = time.process_time()
            rss = int(pread(fds[2], 128, 0).split(None, 2)[1]) * self._page / _MIB
            return (f"{_f3(now)},{self.host_cell},{pct},{_f3((total - avail) / 1024.0)},{_f3(total / 1024.0)},"
                    f"{load},{'' if rapl is None else cell(rapl)},{'' if temp is None else cell(temp)},"
                    f"{_f3(cpu_s)},{_f3(rss)}\n")
        return format_rows((self.sample(now),))  # an odd layout, or no /proc: the row, then its text

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

