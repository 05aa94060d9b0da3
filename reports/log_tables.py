"""A kind of monitor log read file by file, each table checked before any statistic: its implausible
rows dropped (reports/plausible.py), its warnings, malformed rows and reader noted."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, List, Optional

from hpclaunch.reports import columnar, readers
from hpclaunch.reports.plausible import Window, drop_implausible


class Logs:
    """Reads a kind of log file by file: each table's implausible rows dropped (into a new table),
    its warnings and malformed rows noted."""

    def __init__(self, window: Optional[Window], engine: str, warnings: List[str],
                 copies: Optional[columnar.Policy] = None):
        self.window, self.engine, self.warnings, self.copies = window, engine, warnings, copies
        self.skipped = 0
        self.engines: set = set()

    def read(self, paths, reader, counters) -> Iterator[readers.Table]:
        paths = list(paths)
        # the next file is read (pyarrow: without the GIL) while the caller works on this one
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead = [pool.submit(reader, p, self.engine, self.copies) for p in paths[:1]]
            for i in range(len(paths)):
                ahead += [pool.submit(reader, p, self.engine, self.copies) for p in paths[i + 1:i + 2]]
                yield self._checked(ahead[i].result(), counters)
                ahead[i] = None  # one file's raw columns in memory at a time, besides the next one

    def one(self, path, reader, counters, upto=None) -> readers.Table:
        """One file, read here (a worker's node: no thread ahead); ``upto``: its first bytes only."""
        return self._checked(reader(path, self.engine, self.copies, upto), counters)

    def _checked(self, raw: readers.Table, counters) -> readers.Table:
        tb, why = drop_implausible(raw, self.window, counters)
        if why:
            self.warnings.append(why)
        self.warnings.extend(tb.warnings)
        self.skipped += tb.skipped_rows
        self.engines.add(tb.engine)
        miss = [c for c in tb.missing_columns if c not in ("ecc_dbe_total",)]
        if miss:
            self.warnings.append(f"{tb.path}: columns absent: {', '.join(miss)} (treated as not measured)")
        return tb
