"""The registry under concurrent writers: 8 processes x 100 submissions against one database.

Every row must land exactly once, local ids must be unique, and no writer may see
"database is locked" (the registry waits on the lock; it never gives up under this load).
"""
import multiprocessing as mp
import os
import sqlite3
import time

PROCS = 8
PER_PROC = 100


def _writer(home: str, worker: int, start, errors) -> None:
    os.environ["HPCLAUNCH_HOME"] = home
    try:
        from hpclaunch.runs.registry import Registry
        start.wait(30)  # every process opens the (possibly new) database at the same moment
        reg = Registry()
        for i in range(PER_PROC):
            local_id = reg.next_local_id()
            rec = reg.add(backend="local", cluster="local", job_id=local_id, name=f"w{worker}-{i}",
                          run_dir=f"/tmp/runs/w{worker}-{i}", profile="local", nodes=1,
                          resolved={"worker": worker, "i": i})
            if i % 10 == 0:
                reg.update_state(rec.key, "RUNNING")
                reg.event(rec.key, "note", {"i": i})
        reg.close()
    except BaseException as e:  # report into the parent: an assertion there names the failure
        errors.put(f"worker {worker}: {type(e).__name__}: {e}")
        raise


def test_concurrent_writers_lose_nothing(tmp_path):
    home = str(tmp_path / "home")  # does not exist yet: the writers race to create the database
    ctx = mp.get_context("fork")
    start = ctx.Barrier(PROCS)
    errors = ctx.Queue()
    t0 = time.monotonic()
    procs = [ctx.Process(target=_writer, args=(home, w, start, errors)) for w in range(PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    elapsed = time.monotonic() - t0
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, "\n".join(found)
    assert [p.exitcode for p in procs] == [0] * PROCS

    db = sqlite3.connect(os.path.join(home, "registry.db"))
    rows = db.execute("SELECT name, job_id FROM jobs").fetchall()
    names = [r[0] for r in rows]
    ids = [r[1] for r in rows]
    expected = {f"w{w}-{i}" for w in range(PROCS) for i in range(PER_PROC)}
    assert len(rows) == PROCS * PER_PROC
    assert set(names) == expected and len(set(names)) == len(names)  # every row, exactly once
    assert sorted(int(i) for i in ids) == list(range(1, PROCS * PER_PROC + 1))  # the counter never repeats
    (counter,) = db.execute("SELECT value FROM counters WHERE name = 'local'").fetchone()
    assert counter == PROCS * PER_PROC
    submitted = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'submitted'").fetchone()[0]
    assert submitted == PROCS * PER_PROC
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    print(f"{PROCS} x {PER_PROC} submissions in {elapsed:.1f} s")
    assert elapsed < 60, f"took {elapsed:.1f} s"


def test_a_reused_slurm_job_id_retires_the_older_row(tmp_path, monkeypatch):
    """A fresh cluster starts job ids at 1 again: the registry must take the new job, not fail."""
    monkeypatch.setenv("HPCLAUNCH_HOME", str(tmp_path / "home"))
    from hpclaunch.runs.registry import Registry
    reg = Registry()
    old = reg.add(backend="slurm", cluster="c", job_id="5", name="first", run_dir="/runs/first-5")
    new = reg.add(backend="slurm", cluster="c", job_id="5", name="second", run_dir="/runs/second-5")
    assert new.job_id == "5" and [r.name for r in reg.find("5")] == ["second"]
    assert reg.get(old.key).job_id == f"5~{old.key}" and reg.get(old.key).name == "first"
    assert [e["kind"] for e in reg.events(old.key)] == ["submitted", "job_id_reused"]
    other = reg.add(backend="slurm", cluster="elsewhere", job_id="5", name="third", run_dir="/runs/third-5")
    assert other.job_id == "5" and reg.get(new.key).job_id == "5"  # another cluster's id 5 is another job


def test_an_existing_registry_opens_without_writing_and_a_missing_index_is_made(tmp_path, monkeypatch):
    from hpclaunch.runs import registry as regmod
    path = str(tmp_path / "registry.db")
    regmod.Registry(path).close()
    statements = []
    real_connect = sqlite3.connect

    def traced(*args, **kwargs):
        db = real_connect(*args, **kwargs)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(regmod.sqlite3, "connect", traced)
    regmod.Registry(path).close()
    assert not [s for s in statements if s.strip().startswith(("BEGIN", "CREATE", "INSERT"))], statements
    with real_connect(path) as db:
        db.execute("DROP INDEX jobs_time")
    statements.clear()
    regmod.Registry(path).close()
    assert any(s.strip().startswith("CREATE INDEX IF NOT EXISTS jobs_time") for s in statements), statements
    with real_connect(path) as db:
        assert db.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs_time'").fetchone()
