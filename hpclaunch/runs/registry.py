"""The job registry: every submission, its run directory and what became of it (SQLite).

It is also the audit trail: who submitted what, when, from which job file (by hash), with
which resolved settings, and every state change after. Writers use short IMMEDIATE
transactions in WAL mode, so concurrent submitters on one machine never lose a row.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, Iterator, Optional, Sequence

from hpclaunch.common.atomic import file_in_the_way
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.common.identity import current_user
from dataclasses import dataclass
from hpclaunch.runs.registry_schema import ACTIVE, DDL, DDL_OBJECTS, FINAL_STATES, SCHEMA_VERSION  # noqa: F401 (FINAL_STATES: re-exported)


def home() -> str:
    return os.environ.get("HPCLAUNCH_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state", "hpclaunch")


@dataclass
class JobRecord:
    key: int
    backend: str
    cluster: str
    job_id: str
    name: str
    user: str
    host: str
    submit_time: float
    job_file: Optional[str]
    job_sha256: Optional[str]
    profile: Optional[str]
    partition: Optional[str]
    launcher: Optional[str]
    nodes: Optional[int]
    array_size: Optional[int]
    run_dir: str
    resolved: Optional[str]
    attempts: int
    state: str
    exit_code: Optional[int]
    end_time: Optional[float]
    parent_key: Optional[int]

    def public(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("resolved", "key")}
        return out


# Each column's type as JobRecord holds it. SQLite keeps whatever a hand edit (or a bad tool)
# wrote, so rows are read defensively: a value of another type becomes this type, or, where it
# cannot, None (a nullable column) or the column's empty value.
_COLUMNS = {"key": int, "backend": str, "cluster": str, "job_id": str, "name": str, "user": str, "host": str,
            "submit_time": float, "job_file": str, "job_sha256": str, "profile": str, "partition": str,
            "launcher": str, "nodes": int, "array_size": int, "run_dir": str, "resolved": str, "attempts": int,
            "state": str, "exit_code": int, "end_time": float, "parent_key": int}
_NOT_NULL = {"key": 0, "backend": "", "cluster": "", "job_id": "", "name": "", "user": "", "host": "",
             "submit_time": 0.0, "run_dir": "", "attempts": 1, "state": "UNKNOWN"}


_SQL_TYPE = {int: "integer", float: "real", str: "text"}
_OR_NULL = ", 'null'"


def _as(kind: type, value: Any) -> Any:
    if value is None or type(value) is kind:
        return value
    if kind is str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    try:
        out = kind(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if kind is float and out != out:  # NaN
        return None
    return out


def _record(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    values = {}
    for name, kind in _COLUMNS.items():
        value = _as(kind, data.get(name))
        values[name] = _NOT_NULL.get(name) if value is None else value
    return JobRecord(**values)


class _Guard:
    """Every use of the database: SQLite's errors become the user's one line, naming the file and
    what to do (a damaged file is moved aside; a locked or unwritable one is waited for or fixed)."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        if kind is not None and issubclass(kind, sqlite3.Error):
            raise _broken(self.path, value) from None
        return False


def _broken(path: str, error: BaseException) -> HpclaunchError:
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        return HpclaunchError(f"{path}: the job registry is damaged ({error}) \u2014 {_DAMAGED_FIX}")
    return HpclaunchError(f"{path}: cannot use the job registry: {error} \u2014 check the disk and the file's "
                          "permissions; if another hpclaunch holds it, try again")


_DAMAGED_FIX = "move it aside; a new one is made (the old one keeps the history, for sqlite3 .recover)"


class Registry:
    def __init__(self, path: str | None = None):
        folder = home() if path is None else os.path.dirname(path)
        self.path = path or os.path.join(folder, "registry.db")
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            self._open()
        except (OSError, sqlite3.Error) as e:
            raise _unusable(folder, self.path, path is None, e) from None

    def _open(self) -> None:
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout = 60000")
        try:
            self._db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            pass  # some network filesystems refuse WAL; rollback journals are still atomic
        self._db.execute("PRAGMA synchronous = FULL")
        if self._check_version() and self._has_every_object():
            return  # made before by this schema: no write transaction (two fsyncs) on every command
        self._db.execute("BEGIN IMMEDIATE")  # SQLite's own errors here are _unusable()'s to explain
        try:
            for statement in DDL.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass

    def _has_every_object(self) -> bool:
        names = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master")}
        return DDL_OBJECTS <= names

    def _check_version(self) -> bool:
        """A registry another hpclaunch wrote: a newer one's is not ours to read or change. True when
        it is at this schema version."""
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
            return False  # new (the tables are made next)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = _as(int, row[0]) if row is not None else SCHEMA_VERSION
        if version is None:
            raise HpclaunchError(f"{self.path}: the job registry is damaged (schema version {row[0]!r}) \u2014 "
                                 f"{_DAMAGED_FIX}")
        if version > SCHEMA_VERSION:
            raise HpclaunchError(f"{self.path}: the job registry was written by a newer hpclaunch (schema "
                                 f"{version}; this one reads {SCHEMA_VERSION}) \u2014 upgrade hpclaunch "
                                 "(pip install -U hpclaunch), or set $HPCLAUNCH_HOME to use another registry")
        return row is not None and version == SCHEMA_VERSION

    def check(self) -> None:
        """Read every page (SQLite's quick_check): a damaged registry is the user's one line *before*
        a submission queues anything or makes a run directory, not a half-recorded job after."""
        with _Guard(self.path):
            rows = self._db.execute("PRAGMA quick_check(1)").fetchall()
        if not rows or rows[0][0] != "ok":
            why = "; ".join(line for line in str(rows[0][0]).splitlines() if not line.startswith("***")) \
                if rows else "no answer"
            raise HpclaunchError(f"{self.path}: the job registry is damaged ({why}) \u2014 {_DAMAGED_FIX}")

    def close(self) -> None:
        self._db.close()

    def _tx(self):
        db = self._db

        path = self.path

        class _T:
            def __enter__(self_inner):
                with _Guard(path):
                    db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, kind, value, tb):
                try:
                    db.execute("COMMIT" if kind is None else "ROLLBACK")
                except sqlite3.Error as e:
                    if kind is None:
                        raise _broken(path, e) from None
                if kind is not None and issubclass(kind, sqlite3.Error):
                    raise _broken(path, value) from None
                return False

        return _T()

    # --- writes ---------------------------------------------------------------------------------

    def next_local_id(self) -> str:
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO counters VALUES ('local', 0)")
            self._db.execute("UPDATE counters SET value = value + 1 WHERE name = 'local'")
            (value,) = self._db.execute("SELECT value FROM counters WHERE name = 'local'").fetchone()
        return str(value)

    def add(self, *, backend: str, cluster: str, job_id: str, name: str, run_dir: str,
            job_file: str | None = None, job_sha256: str | None = None, profile: str | None = None,
            partition: str | None = None, launcher: str | None = None, nodes: int | None = None,
            array_size: int | None = None, resolved: Any = None, state: str = "PENDING",
            parent_key: int | None = None) -> JobRecord:
        now = time.time()
        user, host = current_user(), os.uname().nodename  # gethostname(), without importing socket
        with self._tx():
            self._retire_reused_id(backend, cluster, job_id, now, user)
            cur = self._db.execute(
                "INSERT INTO jobs (backend, cluster, job_id, name, user, host, submit_time, job_file, job_sha256,"
                " profile, partition, launcher, nodes, array_size, run_dir, resolved, state, parent_key)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (backend, cluster, job_id, name, user, host, now, job_file, job_sha256, profile, partition,
                 launcher, nodes, array_size, run_dir,
                 json.dumps(resolved, sort_keys=True, default=str) if resolved is not None else None,
                 state, parent_key))
            key = cur.lastrowid
            self._db.execute("INSERT INTO events (job_key, time, user, kind, detail) VALUES (?,?,?,?,?)",
                             (key, now, user, "submitted", json.dumps({"job_id": job_id, "host": host})))
        return self.get(key)

    def _retire_reused_id(self, backend: str, cluster: str, job_id: str, now: float, user: str) -> None:
        """Slurm job ids restart with a fresh cluster (a new StateSaveLocation): an older row with the
        same id is a different job. It keeps its history under `<id>~<key>`, and the id means the new job."""
        row = self._db.execute("SELECT key FROM jobs WHERE backend = ? AND cluster = ? AND job_id = ?",
                               (backend, cluster, job_id)).fetchone()
        if row is None:
            return
        old = row["key"]
        self._db.execute("UPDATE jobs SET job_id = ? WHERE key = ?", (f"{job_id}~{old}", old))
        self._db.execute("INSERT INTO events (job_key, time, user, kind, detail) VALUES (?,?,?,?,?)",
                         (old, now, user, "job_id_reused",
                          json.dumps({"job_id": job_id, "now": f"{job_id}~{old}",
                                      "why": "the cluster gave the same id to a newer job"})))

    def update_state(self, key: int, state: str, *, exit_code: int | None = None,
                     attempts: int | None = None, end_time: float | None = None, detail: Any = None) -> bool:
        """Record a state change; True when it is the job's first final state (its alerts are due)."""
        with self._tx():
            row = self._db.execute("SELECT state, attempts, exit_code FROM jobs WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            changed = (row["state"] != state or (attempts is not None and attempts != row["attempts"])
                       or (exit_code is not None and exit_code != row["exit_code"]))
            if not changed:
                return False
            first_final = state in FINAL_STATES and row["state"] not in FINAL_STATES
            self._db.execute(
                "UPDATE jobs SET state = ?, exit_code = COALESCE(?, exit_code), attempts = COALESCE(?, attempts),"
                " end_time = COALESCE(?, end_time) WHERE key = ?",
                (state, exit_code, attempts, end_time if end_time is not None else
                 (time.time() if state in FINAL_STATES else None), key))
            self._db.execute("INSERT INTO events (job_key, time, user, kind, detail) VALUES (?,?,?,?,?)",
                             (key, time.time(), current_user(), f"state:{state}",
                              json.dumps(detail if detail is not None else
                                         {"exit_code": exit_code, "attempts": attempts})))
        return first_final

    def event_once(self, key: int, kind: str, detail: Any, once: str) -> bool:
        """Record an event unless one of this kind with the same ``once`` key was recorded for the job
        (in one transaction: two commands that see the same thing record it once); True if recorded."""
        with self._tx():
            for row in self._db.execute("SELECT detail FROM events WHERE job_key = ? AND kind = ?", (key, kind)):
                try:
                    if json.loads(row[0] or "null").get("once") == once:
                        return False
                except (ValueError, AttributeError):
                    continue
            self._db.execute("INSERT INTO events (job_key, time, user, kind, detail) VALUES (?,?,?,?,?)",
                             (key, time.time(), current_user(), kind, json.dumps(dict(detail, once=once), default=str)))
        return True

    def event(self, key: int, kind: str, detail: Any = None) -> None:
        with self._tx():
            self._db.execute("INSERT INTO events (job_key, time, user, kind, detail) VALUES (?,?,?,?,?)",
                             (key, time.time(), current_user(), kind, json.dumps(detail, default=str)))

    # --- reads ----------------------------------------------------------------------------------

    def _rows(self, sql: str, args: Any = ()) -> list[sqlite3.Row]:
        with _Guard(self.path):
            return self._db.execute(sql, args).fetchall()

    def get(self, key: int) -> JobRecord:
        rows = self._rows("SELECT * FROM jobs WHERE key = ?", (key,))
        if not rows:
            raise HpclaunchError(f"{self.path}: job record {key} is missing from the job registry \u2014 "
                                 "was the registry replaced? See `hpclaunch list --all`")
        return _record(rows[0])

    def find(self, ref: str) -> list[JobRecord]:
        """Jobs matching a Slurm id, a local id, or a name (newest first)."""
        rows = self._rows("SELECT * FROM jobs WHERE job_id = ? ORDER BY submit_time DESC", (ref,))
        if not rows:
            rows = self._rows("SELECT * FROM jobs WHERE name = ? ORDER BY submit_time DESC", (ref,))
        return [_record(r) for r in rows]

    @staticmethod
    def _where(since: float | None, active_only: bool) -> tuple[str, list[Any]]:
        sql, args = " WHERE 1=1", []
        if since is not None:
            sql += " AND submit_time >= ?"
            args.append(since)
        if active_only:
            sql += " AND " + ACTIVE
        return sql, args

    def list(self, since: float | None = None, active_only: bool = False, limit: int | None = None,
             offset: int = 0) -> list[JobRecord]:
        """Jobs newest first: submitted since `since`, only the active ones, a page of `limit` from `offset`."""
        where, args = self._where(since, active_only)
        sql = "SELECT * FROM jobs" + where + " ORDER BY submit_time DESC, key DESC"
        if limit or offset:
            sql += f" LIMIT {int(limit) if limit else -1} OFFSET {max(0, int(offset))}"
        return [_record(r) for r in self._rows(sql, args)]

    def recent(self, since: float) -> list[JobRecord]:
        """Every active job, and every job that ended (without an end time: was submitted) since `since`,
        newest first: what `status` shows, by index, however long the registry's history."""
        rows = self._rows("SELECT * FROM jobs WHERE " + ACTIVE + " UNION SELECT * FROM jobs WHERE end_time >= ?"
                          " UNION SELECT * FROM jobs WHERE end_time IS NULL AND submit_time >= ?", (since, since))
        return sorted((_record(r) for r in rows), key=lambda r: (r.submit_time, r.key), reverse=True)

    def family(self, key: int) -> list[JobRecord]:
        """A job and the rows whose parent it is (a sweep's arrays)."""
        return [_record(r) for r in self._rows("SELECT * FROM jobs WHERE key = ? UNION SELECT * FROM jobs "
                                               "WHERE parent_key = ?", (key, key))]

    def by_run_dir(self, run_dir: str) -> list[JobRecord]:
        """The jobs whose run directory is `run_dir` (as recorded), newest first."""
        return [_record(r) for r in self._rows("SELECT * FROM jobs WHERE run_dir = ? ORDER BY submit_time DESC",
                                               (run_dir,))]

    def ledger(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        """The fleet ledger's entries of these jobs: {key: (logs signature, summary JSON)}."""
        out: dict[int, tuple[str, str]] = {}
        keys = list(keys)
        for i in range(0, len(keys), 900):  # SQLite's bound-parameter limit
            chunk = keys[i:i + 900]
            for row in self._rows("SELECT job_key, signature, summary FROM ledger WHERE job_key IN (%s)"
                                  % ",".join("?" * len(chunk)), chunk):
                out[row[0]] = (row[1], row[2])
        return out

    # What the fleet view reads of a job, with its ledger entry (signature, summary JSON; None if none).
    FLEET_COLUMNS = ("key", "job_id", "name", "user", "partition", "run_dir", "submit_time", "state", "end_time",
                     "signature", "summary")

    def fleet(self, since: float | None = None, limit: int | None = None, offset: int = 0) -> list[tuple]:
        """FLEET_COLUMNS of the jobs submitted since `since`, newest first (a page of `limit` from
        `offset`), in one query: a 10,000-job fleet view reads this and nothing else when every job is
        ledgered."""
        kinds = [_COLUMNS.get(c, str) for c in self.FLEET_COLUMNS]
        defaults = [_NOT_NULL.get(c) for c in self.FLEET_COLUMNS]
        names = [("l." if c in ("signature", "summary") else "j.") + c for c in self.FLEET_COLUMNS]
        # SQLite says which rows hold only the types JobRecord holds (the rows hpclaunch wrote): those
        # are taken as they are, the others read defensively, as _record does (a tenth of the view's
        # time went to checking 110,000 values in Python).
        plain = " AND ".join(f"typeof({n}) IN ('{_SQL_TYPE[k]}'{'' if c in _NOT_NULL else _OR_NULL})"
                             for c, n, k in zip(self.FLEET_COLUMNS, names, kinds))
        sql = (f"SELECT {', '.join(names)}, {plain} FROM jobs j LEFT JOIN ledger l ON l.job_key = j.key")
        args: list[Any] = []
        if since is not None:
            sql += " WHERE j.submit_time >= ?"
            args.append(since)
        with _Guard(self.path):
            cur = self._db.cursor()
            cur.row_factory = None   # plain tuples
            page = f" LIMIT {int(limit) if limit else -1} OFFSET {max(0, int(offset))}" if limit or offset else ""
            rows = cur.execute(sql + " ORDER BY j.submit_time DESC, j.key DESC" + page, args).fetchall()
        out = []
        for row in rows:
            if row[-1]:
                out.append(row[:-1])
                continue
            vals = tuple(_as(k, v) for k, v in zip(kinds, row))
            if None in vals:
                vals = tuple(d if v is None else v for v, d in zip(vals, defaults))
            out.append(vals)
        return out

    def put_ledger(self, entries: Sequence[tuple[int, str, str]]) -> None:
        """Write (key, logs signature, summary JSON) entries, replacing older ones, in one transaction."""
        if not entries:
            return
        now = time.time()
        with self._tx():
            self._db.executemany("INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?)",
                                 [(k, sig, summary, now) for k, sig, summary in entries])

    def goodput(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        """The goodput ledger's entries of these jobs: {key: (signature, summary JSON)} (runs/goodput.py)."""
        out: dict[int, tuple[str, str]] = {}
        keys = list(keys)
        for i in range(0, len(keys), 900):
            chunk = keys[i:i + 900]
            for row in self._rows("SELECT job_key, signature, summary FROM goodput WHERE job_key IN (%s)"
                                  % ",".join("?" * len(chunk)), chunk):
                out[row[0]] = (row[1], row[2])
        return out

    def put_goodput(self, entries: Sequence[tuple]) -> None:
        """Write (key, signature, partition, first start, node-hours, node failures, summary JSON) entries."""
        if not entries:
            return
        now = time.time()
        with self._tx():
            self._db.executemany("INSERT OR REPLACE INTO goodput VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                 [tuple(e) + (now,) for e in entries])

    def node_failures(self, partition: str | None, since: float) -> tuple[int, float]:
        """(node failures, node-hours) the goodput ledger holds for jobs of `partition` (None: no partition
        named) that started since `since`: the fleet's failure rate (docs/recovery.md)."""
        where = "partition IS NULL" if partition is None else "partition = ?"
        args: list[Any] = [] if partition is None else [partition]
        row = self._rows(f"SELECT COALESCE(SUM(node_failures), 0), COALESCE(SUM(node_hours), 0.0) FROM goodput "
                         f"WHERE {where} AND first_start >= ?", args + [since])[0]
        return int(row[0] or 0), float(row[1] or 0.0)

    def events(self, key: int) -> Iterator[sqlite3.Row]:
        return iter(self._rows("SELECT * FROM events WHERE job_key = ? ORDER BY id", (key,)))

    def count(self, since: float | None = None, active_only: bool = False) -> int:
        where, args = self._where(since, active_only)
        return self._rows("SELECT COUNT(*) FROM jobs" + where, args)[0][0]


def _unusable(folder: str, db: str, default: bool, error: Exception) -> Exception:
    """Why the registry cannot be opened, as the user's one-line error naming the path and the fix."""
    why = getattr(error, "strerror", None) or str(error)
    setting = "$HPCLAUNCH_HOME" if default and os.environ.get("HPCLAUNCH_HOME") else None
    blocker = file_in_the_way(folder)
    if blocker:
        what, where = f"{blocker} is a file, not a folder", folder
    else:
        what, where = why, (db if os.path.isdir(folder) else folder)
    if isinstance(error, HpclaunchError):
        return error
    if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
        fix = f"it is not a registry (damaged, or another file): {_DAMAGED_FIX}"
    elif setting:
        fix = f"point {setting} at a folder you can write (or unset it)"
    else:
        fix = "make that folder writable, or set $HPCLAUNCH_HOME to a folder you can write"
    return HpclaunchError(f"{where}: cannot use the job registry: {what} \u2014 {fix}")


