"""The registry's tables (SQLite): jobs, their events, the ledger and goodput summaries, and the
index of active jobs. The Registry (registry.py) opens, checks and queries them."""
from __future__ import annotations

from hpclaunch.launchers.backends.base import FINAL_STATES as _FINAL

SCHEMA_VERSION = 1
FINAL_STATES = frozenset(s.value for s in _FINAL)  # state words as stored in the registry

DDL = """
CREATE TABLE IF NOT EXISTS jobs (
    key          INTEGER PRIMARY KEY AUTOINCREMENT,
    backend      TEXT NOT NULL,
    cluster      TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    name         TEXT NOT NULL,
    user         TEXT NOT NULL,
    host         TEXT NOT NULL,
    submit_time  REAL NOT NULL,
    job_file     TEXT,
    job_sha256   TEXT,
    profile      TEXT,
    partition    TEXT,
    launcher     TEXT,
    nodes        INTEGER,
    array_size   INTEGER,
    run_dir      TEXT NOT NULL,
    resolved     TEXT,
    attempts     INTEGER NOT NULL DEFAULT 1,
    state        TEXT NOT NULL DEFAULT 'PENDING',
    exit_code    INTEGER,
    end_time     REAL,
    parent_key   INTEGER,
    UNIQUE (backend, cluster, job_id)
);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name);
CREATE INDEX IF NOT EXISTS jobs_time ON jobs(submit_time);
CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs(job_id);
CREATE INDEX IF NOT EXISTS jobs_run_dir ON jobs(run_dir);
CREATE INDEX IF NOT EXISTS jobs_parent ON jobs(parent_key);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(submit_time) WHERE %(active)s;
CREATE TABLE IF NOT EXISTS events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_key  INTEGER NOT NULL REFERENCES jobs(key),
    time     REAL NOT NULL,
    user     TEXT NOT NULL,
    kind     TEXT NOT NULL,
    detail   TEXT
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_key);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    job_key    INTEGER PRIMARY KEY REFERENCES jobs(key),
    signature  TEXT NOT NULL,
    summary    TEXT NOT NULL,
    made       REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS goodput (
    job_key        INTEGER PRIMARY KEY REFERENCES jobs(key),
    signature      TEXT NOT NULL,
    partition      TEXT,
    first_start    REAL,
    node_hours     REAL NOT NULL,
    node_failures  INTEGER NOT NULL,
    summary        TEXT NOT NULL,
    made           REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS goodput_partition ON goodput(partition, first_start);
"""
# A job that is not final, as SQL: the state words written out, so that the partial index jobs_active
# (the active jobs, newest first: `status`, `list` and the dashboard ask for them among 100,000 rows)
# serves the queries that say the same words. (A final state added later leaves an older registry's
# index unused by the new queries, not wrong: they scan.)
ACTIVE = "state NOT IN (%s)" % ",".join(f"'{s}'" for s in sorted(FINAL_STATES))
DDL = DDL % {"active": ACTIVE}
# The tables and indexes DDL makes: a registry that has them all needs no DDL run when opened.
DDL_OBJECTS = {part.split()[0] for part in DDL.split("IF NOT EXISTS ")[1:]}
