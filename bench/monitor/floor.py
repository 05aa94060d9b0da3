"""The floor under any Python monitor at 1 Hz, run beside the daemons (bench_monitor.py section 6).

``python floor.py MODE SECONDS INTERVAL DIR``, MODE:

* ``wake``: wakes on the daemon's grid (``poll`` with a timeout, as the daemon waits) and does
  nothing else: what waking a Python process costs on this machine;
* ``host``: the same, plus what the host row needs from the kernel, done the cheapest way: one
  ``pread`` each of the kept-open ``/proc/stat``, ``/proc/meminfo`` and ``/proc/self/statm``,
  ``getloadavg``, ``process_time``, and one 100-byte ``os.write`` to an ``O_APPEND`` file. No
  parsing, no formatting: the kernel's part of a host sample and the wake-up, nothing of Python.

Prints ``{"mode", "ticks", "cpu_s_per_sample"}`` as JSON (CPU from after set-up to the end).
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
    cpu0 = time.process_time()
    t0 = time.monotonic()
    k = 0
    while True:
        if host:
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
