"""Files the monitor writes into folders other users can write (issue 44, defect 1): node-exporter's
textfile folder (1777, or group-writable for the exporter's group) and a run directory on a shared
project folder. Another user plants a link at a name the monitor writes (the textfile's temporary
name was `.<name>.<pid>.tmp`, predictable; the final `.prom` name; a log's name); the file the link
names is the job user's own, and must keep its content and its mode. The links are owned by uid
65534, as another user's would be; the folders' owner is that user too in the 1777 case (the
exporter's service user owns its folder), so the kernel's protected_symlinks does not stop root
following them either: what is tested is hpclaunch, not the sysctl."""
import os
import signal
import stat

import pytest

from hpclaunch.monitors import schema
from hpclaunch.monitors.logfiles import CsvLog, EventLog

OTHER = 65534


@pytest.fixture(params=["sticky-1777", "group-2770"])
def shared(request, tmp_path):
    assert os.getuid() == 0, "the planted links belong to another user (uid 65534): the tests need root, as CI has"
    folder = tmp_path / request.param
    folder.mkdir()
    if request.param == "sticky-1777":
        os.chown(folder, OTHER, OTHER)
        os.chmod(folder, 0o1777)
    else:
        os.chown(folder, 0, OTHER)
        os.chmod(folder, 0o2770)
    return folder


@pytest.fixture
def victim(tmp_path):
    """A file of the job's user that another user would like overwritten or made readable."""
    path = tmp_path / "private" / "id_ed25519"
    path.parent.mkdir()
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    os.chmod(path, 0o600)
    return path


def plant(link, target):
    os.symlink(target, link)
    os.lchown(link, OTHER, OTHER)


def untouched(victim):
    st = os.stat(victim)
    return victim.read_text() == "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n" and stat.S_IMODE(st.st_mode) == 0o600


class _Events:
    def __init__(self):
        self.seen = []

    def emit(self, kind, detail=None):
        self.seen.append((kind, detail))


def _exporter():
    pytest.importorskip("prometheus_client")
    from hpclaunch.monitors.prometheus import Exporter
    said = []
    x = Exporter({"job_id": "7", "job_name": "j", "user": "u", "node": "n1"}, _Events(), said.append)
    return x, said


@pytest.mark.parametrize("where", ["temporary name", "final name"])
def test_the_textfile_never_writes_through_a_planted_link(shared, victim, where):
    path = shared / "hpclaunch_7_n1.prom"
    # the temporary name the writer used to make, from the pid: what another user could predict
    plant(shared / (f".{path.name}.{os.getpid()}.tmp" if where == "temporary name" else path.name), victim)
    x, said = _exporter()
    old = os.umask(0o077)
    try:
        x.write_textfile_to(str(path))
        x.update(1.7e9, 1, None, [])
        x.update(1.7e9 + 1, 2, None, [])
    finally:
        os.umask(old)
    assert untouched(victim), (victim.read_text(), oct(os.stat(victim).st_mode))
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == 0
    assert "hpclaunch_monitor_samples_total" in path.read_text() and not said, said
    assert not [n for n in os.listdir(shared) if n.endswith(".tmp") and not os.path.islink(shared / n)]
    x.close()
    assert not path.exists() and untouched(victim)


def test_a_textfile_the_monitor_cannot_write_warns_once_and_the_link_is_left(shared, victim, tmp_path):
    """A folder (not a file) planted at the .prom name: the write fails, is said once, and nothing
    else is touched; the temporary file is not left behind."""
    path = shared / "hpclaunch_7_n1.prom"
    path.mkdir()
    x, said = _exporter()
    x.write_textfile_to(str(path))
    x.update(1.7e9, 1, None, [])
    x.update(1.7e9 + 1, 2, None, [])
    assert len(said) == 1 and str(path) in said[0] and "trying again each sample" in said[0], said
    assert sorted(os.listdir(shared)) == [path.name] and untouched(victim)


def test_monitor_logs_are_never_written_through_a_planted_link(shared, victim, tmp_path):
    """A run directory in a shared project folder: links at the CSV logs' and the events log's
    names are moved aside (`.1.old`, as a file with another header is) and fresh files written;
    one of them names another run's log of the same schema, which a header check alone would
    take for a requeued attempt's and append to."""
    other_log = tmp_path / "other-run.host.csv"
    cols = schema.HOST_COLUMNS
    other_log.write_text(schema.header_comment(schema.HOST_SCHEMA) + ",".join(cols) + "\n")
    before = other_log.read_text()
    plant(shared / "n1.host.csv", other_log)
    plant(shared / "n1.gpu.csv", victim)
    plant(shared / "n1.events.jsonl", victim)
    host = CsvLog(str(shared / "n1.host.csv"), schema.HOST_SCHEMA, cols)
    gpu = CsvLog(str(shared / "n1.gpu.csv"), schema.GPU_SCHEMA, schema.GPU_COLUMNS)
    ev = EventLog(str(shared / "n1.events.jsonl"), "n1")
    assert host.write_rows([(1.7e9, "n1") + (None,) * (len(cols) - 2)])
    assert gpu.write_rows([(1.7e9, "n1", 0) + (None,) * (len(schema.GPU_COLUMNS) - 3)])
    assert ev.emit("header", {"pid": 1})
    for log in (host, gpu, ev):
        log.close()
        assert log.moved_aside == log.path + ".1.old" and os.path.islink(log.moved_aside)
        assert stat.S_ISREG(os.lstat(log.path).st_mode)
    assert untouched(victim) and other_log.read_text() == before


def test_a_link_planted_after_the_check_is_refused_not_followed(shared, victim):
    """The race: the name was free when the log was set up, a link is there by its first write.
    The write is refused (O_NOFOLLOW), said through the error hook, the rows dropped."""
    said = []
    log = EventLog(str(shared / "n1.events.jsonl"), "n1", on_error=lambda path, e: said.append(str(e)))
    plant(shared / "n1.events.jsonl", victim)
    assert not log.emit("header", {})
    assert untouched(victim) and len(said) == 1 and "symbolic link" in said[0] and "not followed" in said[0], said


def test_a_fifo_at_a_logs_name_never_holds_the_daemon_up(shared):
    os.mkfifo(shared / "n1.host.csv")

    def stuck(*_):
        raise TimeoutError("the log's set-up waited on the FIFO")
    signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)   # before: open() waited for a reader forever
    try:
        log = CsvLog(str(shared / "n1.host.csv"), schema.HOST_SCHEMA, schema.HOST_COLUMNS)
    finally:
        signal.alarm(0)
    assert log.moved_aside and stat.S_ISFIFO(os.lstat(log.moved_aside).st_mode)
    assert log.write_rows([(1.7e9, "n1") + (None,) * (len(schema.HOST_COLUMNS) - 2)])
    log.close()
