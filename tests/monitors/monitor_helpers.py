"""Helpers shared by the monitor tests (a plain module: conftest.py is not importable)."""

import os

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
