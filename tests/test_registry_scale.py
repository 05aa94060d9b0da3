"""The registry at scale (issue 50): concurrent `hpclaunch submit`s lose and repeat no row; `list` and the
fleet view page instead of reading the whole history; `status` and the lookups go by index."""
import json
import os
import sqlite3
import threading
import time

import pytest
from hlcli import hl, job_file

from hpclaunch.runs import registry as regmod
from hpclaunch.runs.registry import FINAL_STATES, Registry

SUBMITTERS, EACH = 8, 8


def _fill(reg, n, state="COMPLETED", t0=None):
    """``n`` rows through the registry's own API, oldest first (an hour apart from ``t0``)."""
    keys = []
    for i in range(n):
        rec = reg.add(backend="local", cluster="local", job_id=str(1000 + len(keys) + reg.count()), name=f"job{i}",
                      run_dir=f"/runs/job{i}")
        keys.append(rec.key)
    with sqlite3.connect(reg.path) as db:   # spread the submission times (add stamps now)
        t0 = time.time() - 3600 * n if t0 is None else t0
        db.executemany("UPDATE jobs SET submit_time = ?, state = ?, end_time = ? WHERE key = ?",
                       [(t0 + 3600 * i, state, t0 + 3600 * i + 60 if state in FINAL_STATES else None, k)
                        for i, k in enumerate(keys)])
    return keys


def test_concurrent_submitters_lose_and_repeat_no_row(hpc_home, tmp_path):
    """SUBMITTERS processes at once, each submitting EACH tiny local jobs through the CLI."""
    job = job_file(tmp_path, """
name: tiny
launcher: srun
command: ["true"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""")
    errors, ids = [], []

    def submitter(w):
        for i in range(EACH):
            p = hl("submit", job, "--backend", "local", "--json", "-o", f"name=w{w}-{i}", cwd=str(tmp_path), check=False)
            if p.returncode:
                errors.append(p.stderr[-500:])
            else:
                ids.append(json.loads(p.stdout)["job_id"])

    threads = [threading.Thread(target=submitter, args=(w,)) for w in range(SUBMITTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    reg = Registry()
    deadline = time.monotonic() + 600
    while reg.count(active_only=True) and time.monotonic() < deadline:   # no job left running after the test
        hl("list", cwd="/")
        time.sleep(1)
    rows = json.loads(hl("list", "--all", "--json", "--limit", "0", cwd="/").stdout)
    names = sorted(r["name"] for r in rows)
    assert names == sorted(f"w{w}-{i}" for w in range(SUBMITTERS) for i in range(EACH))   # each once
    assert sorted(r["job_id"] for r in rows) == sorted(ids) and len(set(ids)) == len(ids)
    assert {r["state"] for r in rows} == {"COMPLETED"}
    with sqlite3.connect(reg.path) as db:
        assert db.execute("SELECT COUNT(*) FROM events WHERE kind = 'submitted'").fetchone()[0] == len(rows)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_list_pages_through_every_job_once(hpc_home):
    reg = Registry()
    _fill(reg, 250)
    first = hl("list", "--all", "--json", cwd="/")
    page = json.loads(first.stdout)
    assert len(page) == 100 and "150 more: hpclaunch list --all --json --offset 100" in first.stderr
    seen = [r["name"] for r in page]
    while True:
        p = hl("list", "--all", "--json", "--offset", str(len(seen)), cwd="/")
        got = json.loads(p.stdout)
        if not got:
            break
        seen += [r["name"] for r in got]
    assert sorted(seen) == sorted(f"job{i}" for i in range(250)) and len(set(seen)) == 250   # none twice
    assert seen[0] == "job249"   # newest first
    assert len(json.loads(hl("list", "--all", "--json", "--limit", "0", cwd="/").stdout)) == 250
    text = hl("list", "--all", "--limit", "30", "--offset", "200", cwd="/").stdout.splitlines()
    assert len(text) == 31 and text[-1] == "... 20 more: hpclaunch list --all --limit 30 --offset 230 (--limit 0: all)"
    bad = hl("list", "--limit", "-1", cwd="/", check=False)
    assert bad.returncode == 2 and "--limit -1" in bad.stderr and "Traceback" not in bad.stderr


def test_status_reads_active_and_recent_jobs_only(hpc_home):
    reg = Registry()
    now = time.time()
    old_done = _fill(reg, 20, "COMPLETED", t0=now - 30 * 86400)
    old_active = _fill(reg, 2, "PENDING", t0=now - 86400 * 10)
    rec = reg.add(backend="local", cluster="local", job_id="9999", name="just done", run_dir="/runs/x")
    reg.update_state(rec.key, "FAILED", exit_code=1)
    got = {r.key for r in reg.recent(now - 3600)}
    assert got == set(old_active) | {rec.key}
    # the old filter over the whole table, for every row
    every = reg.list()
    assert got == {r.key for r in every if r.state not in FINAL_STATES or (r.end_time or r.submit_time) >= now - 3600}
    assert not set(old_done) & got


@pytest.mark.parametrize("query, args", [
    ("SELECT * FROM jobs WHERE job_id = ?", ("5",)),
    ("SELECT * FROM jobs WHERE run_dir = ?", ("/runs/x",)),
    ("SELECT * FROM jobs WHERE key = ? UNION SELECT * FROM jobs WHERE parent_key = ?", (1, 1)),
    ("SELECT * FROM jobs WHERE " + regmod.ACTIVE + " ORDER BY submit_time DESC", ()),
    ("SELECT * FROM jobs WHERE end_time >= ?", (0.0,)),
    ("SELECT * FROM events WHERE job_key = ? ORDER BY id", (1,)),   # a job's history (status JOB)
    ("SELECT detail FROM events WHERE job_key = ? AND kind = ?", (1, "submitted")),
])
def test_lookups_go_by_index(hpc_home, query, args):
    reg = Registry()
    with sqlite3.connect(reg.path) as db:
        steps = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + query, args).fetchall()]
    on_jobs = [s for s in steps if " jobs" in s or " events" in s]
    assert on_jobs and all("INDEX" in s or "PRIMARY KEY" in s for s in on_jobs), steps   # no scan of the table


def test_an_older_registry_gets_the_new_indexes(tmp_path):
    path = str(tmp_path / "registry.db")
    Registry(path).close()
    with sqlite3.connect(path) as db:
        for name in ("jobs_job_id", "jobs_active", "jobs_end", "jobs_parent", "jobs_run_dir", "events_job"):
            db.execute(f"DROP INDEX {name}")
    Registry(path).close()
    with sqlite3.connect(path) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"jobs_job_id", "jobs_active", "jobs_end", "jobs_parent", "jobs_run_dir", "events_job"} <= names


def test_fleet_view_is_a_page_of_the_newest_jobs(hpc_home, tmp_path):
    reg = Registry()
    _fill(reg, 5)
    p = hl("report", "--since", "30d", "--format", "json", "--limit", "2", "--offset", "1", cwd="/")
    doc = json.loads(p.stdout)
    assert doc["page"] == {"offset": 1, "limit": 2, "jobs_in_window": 5}
    # jobs without logs: each named by a warning, the second and third newest only
    assert len(doc["warnings"]) == 2 and "/runs/job3" in doc["warnings"][0] and "/runs/job2" in doc["warnings"][1]
    text = hl("report", "--since", "30d", "--limit", "2", cwd="/").stdout
    assert "Over jobs 1–2 of the 5 submitted in the window, newest first: --offset 2 for the next" in text
    assert "Over jobs" not in hl("report", "--since", "30d", cwd="/").stdout   # 5 < the default page
    bad = hl("report", "some-job", "--limit", "3", cwd="/", check=False)
    assert bad.returncode == 2 and "page the fleet view" in bad.stderr
