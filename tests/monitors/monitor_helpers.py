"""Helpers shared by the monitor tests (a plain module: conftest.py is not importable)."""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_PATH = os.path.join(HERE, "fake_nvml.py")


class Events:
    """Stands in for EventLog: records (kind, detail)."""

    def __init__(self):
        self.records = []
        self.times = []  # the time_unix passed with each record (None: the log's clock)

    def emit(self, kind, detail=None, time_unix=None):
        self.records.append((kind, detail or {}))
        self.times.append(time_unix)
        return True

    def times_of(self, kind):
        return [t for (k, _), t in zip(self.records, self.times) if k == kind]

    def kinds(self):
        return [k for k, _ in self.records]

    def of(self, kind):
        return [d for k, d in self.records if k == kind]


def read_csv(path):
    """(schema line, header, complete rows as dicts), by the contract: a row counts only if its
    line ends in a newline (the text after the last one is dropped) and has the header's cell count."""
    with open(path) as f:
        lines = f.read().split("\n")[:-1]
    assert lines[0].startswith("# schema="), lines[:2]
    header = lines[1].split(",")
    rows = [dict(zip(header, ln.split(","))) for ln in lines[2:]
            if ln and len(ln.split(",")) == len(header)]
    return lines[0], header, rows


def read_events(path):
    """Events by the contract: only newline-terminated lines that parse."""
    import json
    out = []
    with open(path) as f:
        for ln in f:
            if not ln.endswith("\n"):
                continue
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass  # a partial last line
    return out


def wait_for(check, what, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"no {what} after {timeout} s")


def free_ports(n=1):
    """n consecutive ports nothing listens on, with a socket bound to each (close them to free them)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        held = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("", p))
            return base, held
        except OSError:
            for s in held:
                s.close()
    raise AssertionError(f"no {n} consecutive free ports")


class PrometheusServer:
    """A real Prometheus (Debian's package) on 127.0.0.1:port, scraping ``targets`` every second, its
    data in ``folder``; queried through its HTTP API."""

    def __init__(self, binary, folder, targets, port):
        self.port = port
        cfg = os.path.join(str(folder), "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n  - job_name: hpclaunch\n"
                    f"    static_configs: [{{targets: {json.dumps(list(targets))}}}]\n")
        self.proc = subprocess.Popen([binary, f"--config.file={cfg}",
                                      f"--storage.tsdb.path={os.path.join(str(folder), 'tsdb')}",
                                      f"--web.listen-address=127.0.0.1:{port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def query(self, q, at=None):
        """The result of an instant PromQL query (at ``at``, unix seconds), or None if it failed."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?query={urllib.parse.quote(q)}"
        if at is not None:
            url += f"&time={at:.3f}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                res = json.loads(r.read().decode())
        except (urllib.error.URLError, ConnectionError):
            return None
        return res["data"]["result"] if res.get("status") == "success" else None

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
