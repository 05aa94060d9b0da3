"""Hostile input (issue 15): every bad job file, profile, override or registry is refused in one line
per problem naming the file, the field, the value (escaped) and the fix, exit 2, no traceback, in
bounded time and memory, with nothing half-written."""
import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
import time

import pytest

GOOD = "name: j\ncommand: [python, train.py]\n"
# The command as a user runs it, under a 1 GiB address-space cap: a defect that reads or expands
# without bound fails here with a MemoryError instead of taking the machine with it.
AS_CAP = 1 << 30


def run(*args, cwd=None, env=None, timeout=30, cap=AS_CAP):
    """`python -m hpclaunch ARGS` -> (rc, stdout, stderr, cpu seconds, max RSS in MiB, wall seconds)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "hpclaunch", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"hpclaunch {' '.join(args)} did not finish in {timeout} s")
    wall = time.monotonic() - start
    # communicate() reaped it: its rusage is in RUSAGE_CHILDREN only as a running maximum, so the
    # per-child figures come from a second, measured run when a test needs them (measure()).
    return proc.returncode, out, err, wall


# hpclaunch runs as the child of a small interpreter that reports its rusage. Spawned straight from
# this test process (torch loaded by earlier tests: hundreds of MB), its max RSS would count the
# parent's pages: Linux records the old mm's high-water mark at exec, and a fork copies it.
_MEASURE = """
import json, os, resource, sys
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (%d, %d))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.execv(sys.executable, [sys.executable, "-m", "hpclaunch"] + sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, usage.ru_maxrss]))
"""


def measure(*args, cwd=None, timeout=30):
    """(rc, stderr, cpu seconds, max RSS MiB, wall seconds) of one `hpclaunch ARGS`, from wait4."""
    start = time.monotonic()
    with open(os.path.join(cwd or ".", "stderr.txt"), "w") as err_file:
        try:
            proc = subprocess.run([sys.executable, "-S", "-c", _MEASURE % (AS_CAP, AS_CAP), *args], cwd=cwd,
                                  stdout=subprocess.PIPE, stderr=err_file, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hpclaunch {' '.join(args)} did not finish in {timeout} s")
    rc, cpu, maxrss_kib = json.loads(proc.stdout)
    with open(os.path.join(cwd or ".", "stderr.txt")) as f:
        err = f.read()
    return rc, err, cpu, maxrss_kib / 1024, time.monotonic() - start


def refused(rc, err, *words):
    """Exit 2, no traceback, every line one problem, and the words in the message."""
    assert rc == 2, f"exit {rc}\n{err}"
    assert "Traceback" not in err and not re.search(r"^\w*(Error|Exception)\b", err, re.M), err
    lines = err.strip().splitlines()
    assert lines, "no message"
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"
    return lines


def write(tmp_path, name, text, mode="w"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def alias_bomb(depth=9):
    """About 500 bytes: one sweep value that expands to 9**depth scalars."""
    levels = ["&a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for i in range(1, depth):
        levels.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return ("name: j\ncommand: [echo, '{p}']\nprofile: local\nsweep:\n  parameters:\n"
            "    p: [[" + ", ".join(levels) + "]]\n")


# --- 1. bounded reading ------------------------------------------------------------------------

def test_alias_bomb_in_a_sweep_is_refused_before_it_expands(tmp_path):
    path = write(tmp_path, "bomb.yaml", alias_bomb())
    assert os.path.getsize(path) < 600
    for command in ("validate", "render"):
        rc, out, err, wall = run(command, path)
        refused(rc, err, "bomb.yaml", "alias")
        assert out == ""
        assert len(err.splitlines()) == 1


def test_anchors_as_a_huge_command_are_refused(tmp_path):
    text = "name: j\ncommand: [&s '" + "x" * 10000 + "'" + ", *s" * 5000 + "]\n"
    path = write(tmp_path, "anchors.yaml", text)
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "anchors.yaml", "alias")
    assert wall < 10


def test_a_job_file_over_the_size_limit_is_refused_unread(tmp_path):
    path = write(tmp_path, "big.yaml", GOOD + ("# padding\n" * 200_000))
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "big.yaml", "1 MiB")
    assert len(err.splitlines()) == 1


def test_a_million_env_entries_are_refused(tmp_path):
    path = write(tmp_path, "env.yaml", GOOD + "env:\n" + "".join(f"  V{i}: x\n" for i in range(1_200_000)))
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "env.yaml")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_a_job_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    if kind == "dev-zero":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "pipe.yaml")
        os.mkfifo(path)
    else:
        path = str(tmp_path / "dir.yaml")
        os.mkdir(path)
    rc, out, err, wall = run("validate", path, timeout=10)
    refused(rc, err, path, "not a regular file" if kind != "directory" else "directory")
    assert len(err.splitlines()) == 1


def test_a_profile_that_is_not_a_regular_file_is_refused(tmp_path):
    pipe = str(tmp_path / "site.yaml")
    os.mkfifo(pipe)
    path = write(tmp_path, "job.yaml", GOOD + f"profile: {pipe}\n")
    rc, out, err, wall = run("validate", path, timeout=10)
    refused(rc, err, "site.yaml", "not a regular file")


def test_invalid_utf8_is_refused_with_its_byte_offset(tmp_path):
    data = b"name: j\xff\xfe\ncommand: [python, train.py]\n"
    path = write(tmp_path, "latin.yaml", data)
    for command in ("validate", "render"):
        rc, out, err, wall = run(command, path)
        refused(rc, err, "latin.yaml", "UTF-8", "byte 7")
        assert out == ""


def test_deep_nesting_is_refused_in_one_line(tmp_path):
    path = write(tmp_path, "deep.yaml", GOOD + "env: " + "[" * 1000 + "]" * 1000 + "\n")
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "deep.yaml", "nested")
    assert len(err.splitlines()) == 1


def test_a_recursive_alias_is_refused(tmp_path):
    path = write(tmp_path, "loop.yaml", GOOD + "env: &e {A: *e}\n")
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "loop.yaml")


# --- 2. profile strings that reach the script --------------------------------------------------

PROFILE = "name: site\nnode: {cpus: 4}\n"


@pytest.mark.parametrize("field,text", [
    ("name", "name: \"site\\ntouch {canary}\"\nnode: {cpus: 4}\n"),
    ("name", "name: \"site $(touch {canary})\"\nnode: {cpus: 4}\n"),
    ("setup", PROFILE + "setup: [\"module load x\\ntouch {canary}\"]\n"),
    ("setup", PROFILE + "setup: [\"module load x\\u0000\"]\n"),
    ("description", PROFILE + "description: \"one\\ntouch {canary}\"\n"),
    ("node.gpu_model", PROFILE.replace("{cpus: 4}", "{cpus: 4, gpu_model: \"a\\nb\"}")),
    ("mpi.mpirun_args", PROFILE + "mpi: {mpirun_args: [\"a\\u0000b\"]}\n"),
])
def test_profile_strings_that_reach_the_script_are_checked(tmp_path, field, text):
    canary = str(tmp_path / "CANARY")
    write(tmp_path, "site.yaml", text.replace("{canary}", canary))
    path = write(tmp_path, "job.yaml", GOOD + "profile: ./site.yaml\n")
    for command in ("validate", "render"):
        rc, out, err, wall = run(command, path, cwd=str(tmp_path))
        lines = refused(rc, err, "site.yaml", f": {field}: ")
        assert len(lines) == 1, lines  # the newline is shown escaped, never raw
        assert "touch" not in out
    assert not os.path.exists(canary)


def test_a_profile_name_newline_never_runs_under_the_local_backend(tmp_path):
    canary = str(tmp_path / "CANARY")
    write(tmp_path, "site.yaml", f"name: \"site\\ntouch {canary}\"\nnode: {{cpus: 4}}\n")
    path = write(tmp_path, "job.yaml", GOOD.replace("python, train.py", "'true'")
                 + "profile: ./site.yaml\nlauncher: srun\nmonitor: {interval: 0}\n")
    env = dict(os.environ, HPCLAUNCH_HOME=str(tmp_path / "home"))
    rc, out, err, wall = run("submit", "--backend", "local", "--wait", path, cwd=str(tmp_path), env=env)
    refused(rc, err, "site.yaml", "name")
    assert not os.path.exists(canary)
    assert not os.path.exists(tmp_path / "runs")


# --- 3. a file's content never appears in an error about its kind ------------------------------

SECRET = "root:$6$s3cr3tHASHs3cr3t:19000:0:99999:7:::"


def test_a_profile_path_to_a_non_profile_never_echoes_its_content(tmp_path):
    shadow = write(tmp_path, "shadow", SECRET + "\ndaemon:*:19000:0:99999:7:::\n")
    path = write(tmp_path, "job.yaml", GOOD)
    rc, out, err, wall = run("validate", path, "-o", f"profile={shadow}")
    refused(rc, err, "shadow", "mapping")
    assert "s3cr3t" not in err and "daemon" not in err and "s3cr3t" not in out


def test_a_job_file_that_is_not_a_mapping_never_echoes_its_content(tmp_path):
    path = write(tmp_path, "job.yaml", SECRET + "\n")
    rc, out, err, wall = run("validate", path)
    refused(rc, err, "job.yaml", "mapping")
    assert "s3cr3t" not in err


# --- 4. numbers --------------------------------------------------------------------------------

@pytest.mark.parametrize("text,field", [
    ("name: j\ncommand: [echo, '{p}']\nsweep: {parameters: {p: {range: [0, 10, 0]}}}\n", "sweep.parameters.p"),
    ("name: j\ncommand: [echo, '{p}']\nsweep: {parameters: {p: {range: [0, " + str(10 ** 30) + "]}}}\n",
     "sweep.parameters.p"),
    ("name: j\ncommand: [echo, '{p}']\nsweep: {parameters: {p: {range: [0, 1000000000]}}}\n", "sweep.parameters"),
    (GOOD + "resources: {nodes: " + "9" * 5000 + "}\n", "resources.nodes"),
    (GOOD + "train: {seed: " + "9" * 5000 + "}\n", "train.seed"),
    (GOOD + "resources: {mem: " + "9" * 400 + "K}\n", "resources.mem"),
    (GOOD + "monitor: {interval: .nan}\n", "monitor.interval"),
    (GOOD + "monitor: {interval: .inf}\n", "monitor.interval"),
    (GOOD + "train: {lr: .nan}\n", "train.lr"),
    (GOOD + "train: {lr: -.inf}\n", "train.lr"),
    (GOOD + "train: {lr: " + "9" * 400 + "}\n", "train.lr"),
    (GOOD + "train: {epochs: " + "9" * 30 + "}\n", "train.epochs"),
    (GOOD + "train: {seed: 1.0e+300}\n", "train.seed"),
    (GOOD + "resources: {time: '" + "9" * 400 + ":00'}\n", "resources.time"),
    ("name: j\ncommand: [echo, '{p}']\nsweep: {method: random, samples: 2, parameters: {p: {uniform: [0, .inf]}}}\n",
     "sweep.parameters.p"),
    ("name: j\ncommand: [echo, '{p}']\nsweep: {parameters: {p: [[1, 2], {a: 1}]}}\n", "sweep.parameters.p"),
])
def test_numbers_are_range_checked_before_use(tmp_path, text, field):
    path = write(tmp_path, "job.yaml", text)
    for command in ("validate", "render"):
        rc, out, err, wall = run(command, path)
        refused(rc, err, "job.yaml", f": {field}")
        assert out == ""


# --- 5. the registry ---------------------------------------------------------------------------

def _registry_with_rows(home, n=300):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from hpclaunch.runs.registry import Registry
    reg = Registry(os.path.join(home, "registry.db"))
    for i in range(n):
        reg.add(backend="local", cluster="here", job_id=str(i), name=f"job{i}", run_dir=f"/tmp/r{i}",
                resolved={"pad": "x" * 500})
    reg._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    reg.close()
    return os.path.join(home, "registry.db")


def _corrupt_middle_page(db):
    """Garbage over the middle leaf page of the jobs table (the header and the schema stay good)."""
    con = sqlite3.connect(db)
    size = con.execute("PRAGMA page_size").fetchone()[0]
    pages = [n for (n,) in con.execute("SELECT pageno FROM dbstat WHERE name = 'jobs' AND pagetype = 'leaf'"
                                      " ORDER BY pageno")]
    con.close()
    with open(db, "r+b") as f:
        f.seek((pages[len(pages) // 2] - 1) * size)
        f.write(b"\xa5" * size)


def test_a_registry_with_a_damaged_page_is_one_line_with_advice(tmp_path):
    home = str(tmp_path / "home")
    db = _registry_with_rows(home)
    _corrupt_middle_page(db)
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    # every row (a page of the newest goes by index, and may never touch the damaged page)
    rc, out, err, wall = run("list", "--all", "--limit", "0", env=env)
    lines = refused(rc, err, db, "move it aside")
    assert len(lines) == 1


def test_a_damaged_registry_leaves_no_run_directory(tmp_path):
    home = str(tmp_path / "home")
    db = _registry_with_rows(home)
    _corrupt_middle_page(db)
    path = write(tmp_path, "job.yaml", "name: j\ncommand: ['true']\nlauncher: srun\nmonitor: {interval: 0}\n")
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    rc, out, err, wall = run("submit", "--backend", "local", path, cwd=str(tmp_path), env=env)
    lines = refused(rc, err, db, "move it aside")
    assert len(lines) == 1, lines
    runs = tmp_path / "runs"
    assert not runs.exists() or not os.listdir(runs), os.listdir(runs)


def test_a_hand_edited_row_of_the_wrong_type_is_read(tmp_path):
    home = str(tmp_path / "home")
    db = _registry_with_rows(home, n=3)
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET name = 5, submit_time = 'yesterday', nodes = 'two', job_id = 7.5 WHERE key = 1")
    con.execute("UPDATE jobs SET run_dir = 5, user = x'00ff' WHERE key = 2")
    con.commit()
    con.close()
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    for args in (["list", "--all"], ["list", "--all", "--json"], ["status", "job0"]):
        rc, out, err, wall = run(*args, env=env)
        assert "Traceback" not in err, err
        assert rc in (0, 2), (rc, err)


def test_a_registry_from_a_newer_hpclaunch_says_upgrade(tmp_path):
    home = str(tmp_path / "home")
    db = _registry_with_rows(home, n=2)
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    con.execute("ALTER TABLE jobs ADD COLUMN priority INTEGER")
    con.commit()
    con.close()
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    rc, out, err, wall = run("list", "--all", env=env)
    refused(rc, err, db, "newer hpclaunch", "upgrade")
    assert "move it aside" not in err


# --- 7. refused fast and small -----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["alias-bomb", "50-MB"])
def test_a_hostile_job_file_is_refused_in_under_a_second_and_200_MB(tmp_path, kind):
    if kind == "alias-bomb":
        path = write(tmp_path, "job.yaml", alias_bomb())
    else:
        path = write(tmp_path, "job.yaml", GOOD + "env:\n" + "".join(f"  V{i}: x\n" for i in range(5_000_000)))
        assert os.path.getsize(path) > 50_000_000
    rc, err, cpu, rss_mib, wall = measure("validate", path, cwd=str(tmp_path))
    print(f"{kind}: exit {rc}, {cpu:.2f} s CPU, {wall:.2f} s wall, max RSS {rss_mib:.0f} MiB")
    refused(rc, err, "job.yaml")
    assert cpu < 1.0 and rss_mib < 200
    assert wall < 5  # CPU time is the measure (this machine is shared); wall only bounds a hang


# --- 8. a big log --------------------------------------------------------------------------------

def _job_with_a_log(tmp_path, monkeypatch, body):
    """A registered job whose rank 0 log is `body` (bytes, or (block, times) written in blocks)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from hpclaunch.runs.registry import Registry
    home, run_dir = str(tmp_path / "home"), str(tmp_path / "run")
    folder = os.path.join(run_dir, "logs", "attempt0")
    os.makedirs(folder)
    with open(os.path.join(folder, "rank0.log"), "wb") as f:
        if isinstance(body, bytes):
            f.write(body)
        else:
            block, times, last = body
            for _ in range(times):
                f.write(block)
            f.write(last)
    reg = Registry(os.path.join(home, "registry.db"))
    reg.add(backend="local", cluster="here", job_id="41", name="big log", run_dir=run_dir, state="COMPLETED")
    reg.close()
    monkeypatch.setenv("HPCLAUNCH_HOME", home)   # measure() passes the environment on
    return os.path.join(folder, "rank0.log")


def test_logs_tail_of_a_200_MB_log_reads_its_end_only(tmp_path, monkeypatch):
    block = b"".join(b"step %06d loss 0.%04d lr 1e-3 samples/s 12345.6\n" % (i, i % 9973) for i in range(20_000))
    last = b"epoch 9 done\n\nfinal: val_accuracy 0.97 \xe2\x9c\x93\n"     # a blank line, a multi-byte char
    path = _job_with_a_log(tmp_path, monkeypatch, (block, 200_000_000 // len(block) + 1, last))
    assert os.path.getsize(path) > 200_000_000
    rc, out, err, wall = run("logs", "big log", "--tail", "3")
    assert rc == 0, err
    assert out.splitlines()[1:] == ["epoch 9 done", "", "final: val_accuracy 0.97 \u2713"], out[-500:]
    rc, err, cpu, rss_mib, wall = measure("logs", "big log", "--tail", "3", cwd=str(tmp_path))
    print(f"logs --tail 3 of {os.path.getsize(path) >> 20} MiB: {cpu:.2f} s CPU, max RSS {rss_mib:.0f} MiB")
    assert rc == 0, err
    assert rss_mib < 100 and cpu < 2.0   # reading it all was > 1 GiB (a MemoryError under the cap)


@pytest.mark.parametrize("body,tail,want", [
    (b"a\nb\nc\n", 2, ["b", "c"]),
    (b"a\nb\nc", 5, ["a", "b", "c"]),                   # fewer lines than asked; no final newline
    (b"x\r\ny\r\nz\r\n", 2, ["y", "z"]),                # CRLF
    (b"", 3, []),
])
def test_logs_tail_keeps_its_line_semantics(tmp_path, monkeypatch, body, tail, want):
    _job_with_a_log(tmp_path, monkeypatch, body)
    rc, out, err, wall = run("logs", "big log", "--tail", str(tail))
    assert rc == 0, err
    assert out.splitlines()[1:] == want, out


def test_logs_tail_across_window_boundaries(tmp_path, monkeypatch):
    """Lines longer than the first window, a window cut inside a multi-byte character."""
    from hpclaunch.runs import jobs
    lines = ["%d " % i + "\u00e9" * (7_000 * (i % 5)) for i in range(60)]     # up to 70 kB a line
    path = _job_with_a_log(tmp_path, monkeypatch, "\n".join(lines).encode() + b"\n")
    for n in (1, 2, 5, 17, 60, 100):
        assert jobs.tail_lines(path, n) == lines[-n:], n


def test_logs_tail_negative_is_refused(tmp_path, monkeypatch):
    _job_with_a_log(tmp_path, monkeypatch, b"a\n")
    rc, out, err, wall = run("logs", "big log", "--tail", "-3")
    refused(rc, err, "--tail -3")
