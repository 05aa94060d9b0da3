"""The monitor's per-rank rows (monitors/rank_progress.py): real rank processes, one that writes and
works, one that waits in a sleep; the rows tell them apart while both run."""
import os
import subprocess
import sys
import time

from hpclaunch.monitors import schema
from hpclaunch.monitors.rank_progress import RankProgress
from monitor_helpers import read_csv


def start_rank(log_dir, rank, code):
    log = open(os.path.join(log_dir, f"rank{rank}.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(log_dir, "ranks.tsv"), "a") as f:
        f.write(f"{rank}\tnode7\t{proc.pid}\n")
    return proc


def test_rows_show_which_rank_works_and_which_waits(tmp_path, monkeypatch):
    log_dir = tmp_path / "logs" / "attempt0"
    log_dir.mkdir(parents=True)
    busy = start_rank(log_dir, 0, "import socket, time\npeers = socket.socketpair()\nt = time.time()\n"
                      "while time.time() - t < 30:\n    sum(range(200000)); print('step', flush=True); time.sleep(0.05)")
    idle = start_rank(log_dir, 1, "import time\nprint('waiting for a peer', flush=True)\ntime.sleep(30)")
    with open(log_dir / "ranks.tsv", "a") as f:       # rank 2 runs on another node: not this monitor's
        f.write("2\tother-node\t1\n")
    try:
        deadline = time.time() + 60
        while not all((log_dir / f"rank{r}.log").stat().st_size for r in (0, 1)) and time.time() < deadline:
            time.sleep(0.1)                           # both started (and the waiting one said so)
        sampler = RankProgress(str(log_dir), "node7", ["node7"], "0")
        first = sampler.sample(time.time())
        time.sleep(1.5)
        second = sampler.sample(time.time())
        assert [r[3] for r in first] == [0, 1] and sampler.due(time.time()) is False
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    rows = {r[3]: (a, r) for a, r in zip(first, second)}
    (a0, b0), (a1, b1) = rows[0], rows[1]
    assert b0[6] > a0[6] and b0[5] > a0[5]            # its log and its CPU time grew
    assert b1[6] == a1[6] and b1[5] - a1[5] < 0.05    # neither did
    assert b0[2] == 0 and b0[1] == "node7" and b0[4] == busy.pid
    assert b0[7] == 2 and b1[7] == 0                  # the sockets each holds
    third = sampler.sample(time.time())               # both ended: no CPU time (the pid is gone)
    assert third[0][5] is None and third[1][5] is None and third[0][6] == b0[6] and third[0][7] is None


def test_the_daemon_writes_them_for_the_job_scripts_log_dir(tmp_path):
    """HPCLAUNCH_LOG_DIR (the job script exports it) turns the rows on: <host>.ranks.csv, by the contract."""
    log_dir = tmp_path / "logs" / "attempt3"
    log_dir.mkdir(parents=True)
    proc = start_rank(log_dir, 0, "import time\ntime.sleep(20)")
    env = dict(os.environ, HPCLAUNCH_LOG_DIR=str(log_dir), HPCLAUNCH_ATTEMPT="3")
    mon = subprocess.Popen([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.2", "--run-dir", str(tmp_path),
                            "--host", "node7", "--no-nvml", "--duration", "1.5"], env=env)
    try:
        assert mon.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    sch, header, rows = read_csv(str(tmp_path / schema.MONITOR_DIR / schema.ranks_file("node7")))
    assert sch == f"# schema={schema.RANKS_SCHEMA}" and tuple(header) == schema.RANKS_COLUMNS
    assert rows and all(r["rank"] == "0" and r["attempt"] == "3" and r["pid"] == str(proc.pid) for r in rows)
    assert len(rows) >= 2                              # the first sample and the last one at the stop
