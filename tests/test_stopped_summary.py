"""A job stopped from outside (its time limit, a cancel) has every rank end of SIGTERM within
milliseconds: the summary never calls that a failure, and points at the rank that stopped making
progress long before the others (issue 45, item 1). Run directories as the job script and the monitor
write them."""
import os

from hpclaunch.launchers.backends.base import JobStatus, State
from hpclaunch.runs.jobs import Job
from hpclaunch.runs.registry import Registry
from hpclaunch.runs.summary import failure_summary

T0 = 1_790_000_000.0
HOSTS = {0: "c1", 1: "c1", 2: "c2", 3: "c2"}


def job_dir(tmp_path, exits, logs_last=None, rows=None):
    """exits: rank -> (code, seconds after T0); rows: rank -> [(t, cpu, log bytes)] for ranks.csv."""
    run = tmp_path / "run-9"
    attempt = run / "logs" / "attempt0"
    attempt.mkdir(parents=True)
    (run / ".hpclaunch").mkdir()
    (run / ".hpclaunch" / "state").write_text(f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1\n")
    (attempt / "ranks.tsv").write_text("".join(f"{r}\t{h}\t{100 + r}\n" for r, h in HOSTS.items()))
    for rank, (code, at) in exits.items():
        (attempt / f"rank{rank}.log").write_text(f"rank {rank} starts\nrank {rank} step 1\nTerminated\n")
        (attempt / f"rank{rank}.exit").write_text(f"{code} {T0 + at:.6f}\n")
        last = (logs_last or {}).get(rank, at)
        os.utime(attempt / f"rank{rank}.log", (T0 + last, T0 + last))
    if rows:
        (run / "monitor").mkdir()
        for host in ("c1", "c2"):
            lines = ["# schema=hpclaunch.monitor.ranks/1", "time_unix,host,attempt,rank,pid,cpu_s,log_bytes"]
            lines += [f"{T0 + t},{host},0,{r},{100 + r},{'' if cpu is None else cpu},{size}"
                      for r, samples in rows.items() if HOSTS[r] == host for t, cpu, size in samples]
            (run / "monitor" / f"{host}.ranks.csv").write_text("\n".join(lines) + "\n")
    rec = Registry().add(backend="slurm", cluster="c", job_id="9", name="stall", run_dir=str(run))
    return Job(rec)


def progressing(until, step=5):
    return [(t, 1.0 + t / 10, 100 + t) for t in range(0, until, step)]


def test_the_time_limit_is_no_failure_and_the_stalled_rank_is_named(tmp_path, hpc_home):
    stalled = [(t, 1.0, 50 + min(t, 10)) for t in range(0, 120, 5)]     # its log grew until t=10
    rows = {0: progressing(120), 1: progressing(120), 2: stalled, 3: progressing(120)}
    rows[2].append((121, None, 140))     # what the stop made it write: seen after it, not progress
    exits = {0: (143, 120.004), 1: (143, 120.001), 2: (143, 120.012), 3: (143, 120.008)}
    text = "\n".join(failure_summary(job_dir(tmp_path, exits, rows=rows), JobStatus(State.TIMEOUT, 124)))
    assert "first failing rank" not in text, text
    assert "the time limit stopped every rank (SIGTERM; exit code 143): no rank failed before it" in text
    assert "rank 2 on c2 stopped making progress 1:50 before the time limit (its last signs: log at" in text, text
    assert "the other 3 rank(s) made progress until 0:05 before it: look at rank 2 first" in text
    assert "rank2.log" in text and "more: hpclaunch logs 9 --rank 2" in text


def test_a_rank_that_failed_before_the_limit_is_the_failure(tmp_path, hpc_home):
    """Rank 3 crashed; the others waited for it in a collective until the time limit."""
    exits = {0: (143, 120.004), 1: (143, 120.001), 2: (143, 120.012), 3: (1, 50.0)}
    text = "\n".join(failure_summary(job_dir(tmp_path, exits), JobStatus(State.TIMEOUT, 124)))
    assert "first failing rank, 70 s before the time limit: rank 3 on c2, exit code 1" in text, text


def test_every_rank_working_until_the_end_needed_more_time(tmp_path, hpc_home):
    rows = {r: progressing(120) for r in HOSTS}
    exits = {r: (143, 120.0 + r / 1000) for r in HOSTS}
    text = "\n".join(failure_summary(job_dir(tmp_path, exits, rows=rows), JobStatus(State.CANCELLED, 125)))
    assert "the cancellation stopped every rank" in text
    assert "every rank made progress until 0:05 before the cancellation, within 0:00 of each other" in text, text


def test_all_waiting_long_before_the_end_is_said(tmp_path, hpc_home):
    rows = {r: [(t, 1.0, 100) for t in range(0, 120, 5)] for r in HOSTS}
    for r in HOSTS:
        rows[r][2] = (10, 1.5 if r != 1 else 1.0, 150 if r != 1 else 100)
    exits = {r: (143, 120.0) for r in HOSTS}
    text = "\n".join(failure_summary(job_dir(tmp_path, exits, rows=rows), JobStatus(State.TIMEOUT, 124)))
    assert "no rank made progress in its last 1:50 before the time limit (all waited: a hang?)" in text, text


def test_without_monitor_rows_logs_written_at_the_stop_say_nothing(tmp_path, hpc_home):
    exits = {r: (143, 120.0) for r in HOSTS}
    text = "\n".join(failure_summary(job_dir(tmp_path, exits), JobStatus(State.TIMEOUT, 124)))
    assert "cannot be told" in text and "first failing rank" not in text
    # ... but a log last written long before its rank ended does (no wrapper line at the end)
    (tmp_path / "run-9").rename(tmp_path / "old")
    text = "\n".join(failure_summary(job_dir(tmp_path, exits, logs_last={2: 20.0, 0: 118.0, 1: 118.0, 3: 118.0}),
                                     JobStatus(State.TIMEOUT, 124)))
    assert "rank 2 on c2 stopped making progress 1:40 before the time limit" in text, text
