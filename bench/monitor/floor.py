"""The floor under any Python monitor at 1 Hz, run beside the daemons (bench_monitor.py section 6).

``python floor.py MODE SECONDS INTERVAL DIR``, MODE:

* ``wake``: wakes on the daemon's grid (``poll`` with a timeout, as the daemon waits) and does
  nothing else: what waking a Python process costs on this machine;
* ``host``: the same, plus what the host row needs from the kernel, done the cheapest way: one
  ``pread`` each of the kept-open ``/proc/stat``, ``/proc/meminfo`` and ``/proc/self/statm``,
  ``getloadavg``, ``process_time``, and one 100-byte ``os.write`` to an ``O_APPEND`` file. No
  parsing, no formatting: the kernel's part of a host sample and the wake-up, nothing of Python.
* ``row``: ``host``, plus the least Python that makes the host row from what it read, in one
  function: fields taken by position, one ``%`` format (cells at ``%.3f``, trailing zeros kept),
  ``encode``. What a Python daemon written for this one row alone would cost: a bound that no
  structure (sources, logs, error handling) gets under.

Prints ``{"mode", "ticks", "cpu_s_per_sample"}`` as JSON (CPU from after set-up to the end).
floor.c does ``wake`` and ``host`` in C, beside these: the same costs with no interpreter.
"""

import json
import os
import select
import sys
import time


def main(mode: str, seconds: float, interval: float, where: str) -> dict:
    r, _w = os.pipe()
    poll = select.poll()
    poll.register(r, select.POLLIN)
    fds = [os.open(p, os.O_RDONLY) for p in ("/proc/stat", "/proc/meminfo", "/proc/self/statm")]
    out = os.open(os.path.join(where, f"floor-{mode}.csv"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = b"x" * 99 + b"\n"
    host = mode == "host"
    row = mode == "row"
    pread, getloadavg, process_time, now = os.pread, os.getloadavg, time.process_time, time.time
    stat_fd, mem_fd, statm_fd = fds
    mib_a_page = os.sysconf("SC_PAGE_SIZE") / 1048576.0
    last = None
    cpu0 = time.process_time()
    t0 = time.monotonic()
    k = 0
    while True:
        if row:
            t = now()
            f = pread(stat_fd, 512, 0).split(None, 9)
            idle = int(f[4]) + int(f[5])
            tot = int(f[1]) + int(f[2]) + int(f[3]) + idle + int(f[6]) + int(f[7]) + int(f[8])
            m = pread(mem_fd, 256, 0).split(b"\n", 3)
            total, avail = int(m[0][9:-3]), int(m[2][13:-3])
            busy = tot - idle
            pct = "" if last is None or tot <= last[0] else "%.1f" % (100.0 * (busy - last[1]) / (tot - last[0]))
            last = (tot, busy)
            load = getloadavg()[0]
            cpu = process_time()
            rss = int(pread(statm_fd, 128, 0).split(None, 2)[1]) * mib_a_page
            os.write(out, ("%.3f,floor,%s,%.3f,%.3f,%.3f,,,%.3f,%.3f\n" % (
                t, pct, (total - avail) / 1024.0, total / 1024.0, load, cpu, rss)).encode())
        elif host:
            os.pread(fds[0], 512, 0)
            os.pread(fds[1], 256, 0)
            os.pread(fds[2], 128, 0)
            os.getloadavg()
            time.process_time()
            os.write(out, line)
        k += 1
        nxt = t0 + k * interval
        if nxt - t0 >= seconds - 1e-9:
            break
        poll.poll(max(0.0, nxt - time.monotonic()) * 1000.0)
    cpu = time.process_time() - cpu0
    return {"mode": mode, "ticks": k, "cpu_s_per_sample": cpu / k}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4])))
