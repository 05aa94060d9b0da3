"""`hpclaunch submit --remote` against the test cluster's node c1 as the login node, over real ssh.

c1 runs sshd in its namespace (tests/cluster/slurm-up.sh); root logs in with the cluster's key. The
nodes share this machine's filesystem, so a code root under tmp_path is "the cluster's shared
filesystem" and the remote hpclaunch is this venv's. The remote keeps its own registry (its
HPCLAUNCH_HOME, set in the profile's remote env); this side's registry is the test's.

Connections are counted by a TCP relay in front of c1's sshd (the profile's host is the relay,
HostKeyAlias=c1 keeps host key checking real): every command must open exactly one connection, however
many remote calls it makes. Nothing here fakes ssh; one test fakes the remote hpclaunch (a script
answering another version), since what it checks is our own version string.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from hlcli import hl

from hpclaunch.launchers.backends.base import state_of

pytestmark = pytest.mark.cluster

VENV_BIN = os.path.dirname(sys.executable)
PROFILE = "c1-remote"


class Relay:
    """A TCP relay to c1:22 on 127.0.0.1 that counts the connections made through it."""

    def __init__(self, target=("c1", 22)):
        self.target, self.connections = target, 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        # shutdown first: close() alone leaves the socket listening while _accept blocks in accept() (Linux)
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()


@pytest.fixture
def cluster_ssh(slurm, tmp_path, monkeypatch):
    """The cluster's ssh key, a known_hosts file that holds the nodes' host key (they share one), and
    the user's own ssh config naming it (HPCLAUNCH_SSH_CONFIG): a profile may not name a known_hosts
    file (spec/ssh_options.py), and root's ~/.ssh on this shared machine is not the tests' to edit."""
    ssh_dir = os.path.join(os.path.dirname(slurm["SLURM_CONF"]), "ssh")
    key = os.path.join(ssh_dir, "id_ed25519")
    assert os.path.isfile(key), f"slurm-up.sh made no ssh key at {key}"
    kind, blob = open(os.path.join(ssh_dir, "host_ed25519.pub")).read().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"c1,c2 {kind} {blob}\n")
    ssh = {"key": key, "known_hosts": str(known), "slurm_conf": slurm["SLURM_CONF"], "tmp": tmp_path}
    use_known_hosts(ssh, monkeypatch, str(known))
    return ssh


def use_known_hosts(ssh, monkeypatch, known_hosts):
    """The user's ssh config (the file HPCLAUNCH_SSH_CONFIG names), trusting `known_hosts` only; the
    jump host c2 gets the cluster's key there, as ssh passes -o options to the destination only."""
    config = ssh["tmp"] / f"ssh_config-{os.path.basename(known_hosts)}"
    config.write_text(f'UserKnownHostsFile "{known_hosts}"\nGlobalKnownHostsFile /dev/null\n'
                      f'Host c2\n  IdentityFile "{ssh["key"]}"\n  IdentitiesOnly yes\n  BatchMode yes\n')
    monkeypatch.setenv("HPCLAUNCH_SSH_CONFIG", str(config))


@pytest.fixture
def runtime_dir(monkeypatch):
    """A short $XDG_RUNTIME_DIR of the test's own, where the control sockets go."""
    folder = tempfile.mkdtemp(prefix="hl-rt-", dir="/tmp")
    os.chmod(folder, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    yield folder
    for sock in _sockets(folder):  # the masters persist a few seconds: stop ours now
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


def _sockets(runtime):
    folder = os.path.join(runtime, "hpclaunch-ssh")
    return [os.path.join(folder, n) for n in os.listdir(folder)] if os.path.isdir(folder) else []


def _close_masters(runtime):
    for sock in _sockets(runtime):
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, timeout=10)
    deadline = time.time() + 5
    while _sockets(runtime) and time.time() < deadline:
        time.sleep(0.1)
    assert not _sockets(runtime)


def write_profile(project, ssh, code_root, remote_home, name=PROFILE, host="root@c1", port=None,
                  command=None, key=None, extra=""):
    command = command or os.path.join(VENV_BIN, "hpclaunch")
    options = {"IdentityFile": key or ssh["key"], "IdentitiesOnly": "yes", "HostKeyAlias": "c1"}
    (project / "hpc_profiles").mkdir(exist_ok=True)
    (project / "hpc_profiles" / f"{name}.yaml").write_text(f"""name: {name}
extends: testcluster
remote:
  host: {host}
  code_root: {code_root}
  command: [{command}]
  env: {{SLURM_CONF: {ssh['slurm_conf']}, HPCLAUNCH_HOME: {remote_home}, OMP_NUM_THREADS: "1"}}
  ssh_options: {json.dumps(options)}
  connect_timeout: 3
{("  port: " + str(port)) if port else ""}
{extra}""")


JOB = """name: remote-ddp
profile: testcluster
launcher: srun
command: [bash, -c, 'echo "rank $SLURM_PROCID on $(hostname)"; cat tracked.txt untracked.txt; sleep "$HOLD"; echo done']
env: {HOLD: "4"}
resources: {nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}
monitor: {interval: 0.5}
"""


def make_project(tmp_path):
    """A git repository: a tracked file, an untracked file git does not ignore, and an ignored one."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "job.yaml").write_text(JOB)
    (project / "tracked.txt").write_text("tracked content\n")
    (project / ".gitignore").write_text("ignored.txt\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "add", "job.yaml", "tracked.txt", ".gitignore"], check=True)
    subprocess.run(["git", "-C", str(project), "-c", "user.email=t@example.org", "-c", "user.name=t", "commit",
                    "-qm", "init"], check=True)
    (project / "untracked.txt").write_text("untracked content\n")
    (project / "ignored.txt").write_text("must not be shipped\n")
    return project


def _code_dirs(code_root):
    return sorted(d for d in os.listdir(code_root) if not d.startswith(".")) if os.path.isdir(code_root) else []


def test_submit_remote_ships_the_project_and_every_command_answers_over_one_connection(
        cluster_ssh, hpc_home, runtime_dir, tmp_path):
    relay = Relay()
    try:
        project = make_project(tmp_path)
        code_root, remote_home = tmp_path / "shared" / "code", tmp_path / "shared" / "remote-home"
        write_profile(project, cluster_ssh, code_root, remote_home, host="root@127.0.0.1", port=relay.port)
        subprocess.run(["git", "-C", str(project), "add", "hpc_profiles"], check=True)

        proc = hl("submit", "job.yaml", "--remote", PROFILE, "--json", cwd=str(project))
        sub = json.loads(proc.stdout)
        assert relay.connections == 1, f"submit opened {relay.connections} connections"
        assert "code: copied 5 files" in proc.stderr, proc.stderr   # job, 2 texts, .gitignore, the profile
        [code_dir] = _code_dirs(code_root)
        code_dir = code_root / code_dir
        assert (code_dir / "tracked.txt").read_text() == "tracked content\n"
        assert (code_dir / "untracked.txt").read_text() == "untracked content\n"
        assert not (code_dir / "ignored.txt").exists()
        assert sub["backend"] == "remote" and sub["remote"] == PROFILE and sub["remote_backend"] == "slurm"
        assert sub["run_dir"].startswith(str(code_dir) + "/runs/")
        # the next command within ControlPersist rides on submit's connection: the settings read back
        # from the registry make the same ssh command line (the same control socket) as the profile did
        assert json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)["remote"] == PROFILE
        assert relay.connections == 1, f"status after submit opened {relay.connections - 1} connections"
        _close_masters(runtime_dir)

        # both registries hold the job: here as remote PROFILE's, there as a Slurm job
        listed = hl("list", "--all", "--json", cwd="/")
        mine = [r for r in json.loads(listed.stdout) if r["job_id"] == sub["job_id"]]
        assert [(r["backend"], r["cluster"]) for r in mine] == [("remote", PROFILE)], mine
        # the job is not final yet: list asked the remote, once (a warning would say why it could not)
        assert relay.connections == 2 and listed.stderr == "", (relay.connections, mine, listed.stderr)
        _close_masters(runtime_dir)
        theirs = json.loads(hl("list", "--all", "--json", cwd="/",
                               env=dict(os.environ, HPCLAUNCH_HOME=str(remote_home))).stdout)
        assert [(r["backend"], r["run_dir"]) for r in theirs] == [("slurm", sub["run_dir"])], theirs

        # logs --follow through ssh until the job ends: one connection
        before = relay.connections
        follow = hl("logs", sub["job_id"], "--rank", "1", "--follow", cwd="/", timeout=180).stdout
        assert relay.connections == before + 1
        assert "[rank 1] rank 1 on c2" in follow and "[rank 1] done" in follow, follow
        _close_masters(runtime_dir)

        for args, check in (
            (("status", sub["job_id"], "--json"),
             lambda out: json.loads(out)["state"] == "COMPLETED" and json.loads(out)["remote"] == PROFILE
             and json.loads(out)["hosts"] == {"c1": [0], "c2": [1]}),
            (("logs", sub["job_id"], "--rank", "1"),
             lambda out: "rank 1 on c2" in out and "tracked content" in out and "untracked content" in out
             and "rank 0 on" not in out),
            (("report", sub["job_id"], "--format", "json"),
             lambda out: json.loads(out)["job"]["id"] == sub["job_id"] and
             sorted(n["host"] for n in json.loads(out)["nodes"]) == ["c1", "c2"]),
        ):
            before = relay.connections
            out = hl(*args, cwd="/").stdout
            assert check(out), f"hpclaunch {' '.join(args)}:\n{out[:2000]}"
            assert relay.connections == before + 1, f"hpclaunch {args[0]} opened {relay.connections - before}"
            _close_masters(runtime_dir)
        listing = hl("list", "--all", cwd="/").stdout
        assert "remote remote-ddp" in listing and f"{PROFILE}:{sub['run_dir']}" in listing, listing

        # a second submit of the unchanged project copies nothing
        marker = code_dir / ".hpclaunch-code"
        stamp = (marker.stat().st_mtime_ns, marker.stat().st_ino, (code_dir / "tracked.txt").stat().st_ino)
        again = hl("submit", "job.yaml", "--remote", PROFILE, "-o", "env.HOLD=600", "--json", cwd=str(project))
        assert "code: unchanged, nothing copied" in again.stderr and "copied 5" not in again.stderr, again.stderr
        assert (marker.stat().st_mtime_ns, marker.stat().st_ino, (code_dir / "tracked.txt").stat().st_ino) == stamp
        assert _code_dirs(code_root) == [code_dir.name]
        assert json.loads(again.stdout)["run_dir"].startswith(str(code_dir) + "/runs/")

        # a changed project gets a code directory of its own; the old one stays as it was
        (project / "untracked.txt").write_text("changed\n")
        changed = hl("submit", "job.yaml", "--remote", PROFILE, "-o", "env.HOLD=600", "--json", cwd=str(project))
        assert "code: copied 5 files" in changed.stderr, changed.stderr
        dirs = _code_dirs(code_root)
        assert len(dirs) == 2 and code_dir.name in dirs
        new = code_root / [d for d in dirs if d != code_dir.name][0]
        assert (new / "untracked.txt").read_text() == "changed\n"
        assert (code_dir / "untracked.txt").read_text() == "untracked content\n"
        assert not [n for n in os.listdir(code_root) if n.startswith(".incoming")]
        _close_masters(runtime_dir)

        # cancel through ssh: one connection; the remote Slurm job ends CANCELLED, and status here says so
        for job in (json.loads(again.stdout), json.loads(changed.stdout)):
            before = relay.connections
            cancel = hl("cancel", job["job_id"], cwd="/")
            assert relay.connections == before + 1, \
                f"cancel opened {relay.connections - before}: {cancel.stdout}{cancel.stderr}"
            _close_masters(runtime_dir)
            deadline, state = time.time() + 120, None
            while time.time() < deadline:
                state = json.loads(hl("status", job["job_id"], "--json", cwd="/").stdout)["state"]
                _close_masters(runtime_dir)
                if state_of(state).final:
                    break
                time.sleep(1)
            assert state == "CANCELLED", (job["job_id"], state)
            row = [r for r in json.loads(hl("list", "--all", "--json", cwd="/").stdout) if r["job_id"] == job["job_id"]]
            assert [r["state"] for r in row] == ["CANCELLED"], row   # the remote's answer, recorded here
            _close_masters(runtime_dir)

        # the login node gone (the relay closed): status of a remote job is one line, exit 69; list still
        # lists, from what the registry last saw, with a warning
        relay.close()
        _close_masters(runtime_dir)
        gone = hl("status", sub["job_id"], cwd="/", check=False)
        lines = gone.stderr.strip().splitlines()
        assert gone.returncode == 69 and len(lines) == 1 and "Traceback" not in gone.stderr, gone.stderr
        assert f"remote {PROFILE}: ssh root@127.0.0.1: cannot reach 127.0.0.1 port {relay.port}" in lines[0], lines
    finally:
        relay.close()


def test_a_folder_that_is_no_repository_is_shipped_whole_less_its_runs(cluster_ssh, hpc_home, runtime_dir, tmp_path):
    project = tmp_path / "plain"
    project.mkdir()
    # the job names the remote's profile itself: --remote without NAME takes the job's profile
    (project / "job.yaml").write_text(JOB.replace('sleep "$HOLD"; ', "").replace("cat tracked.txt untracked.txt; ", "")
                                      .replace("profile: testcluster", f"profile: {PROFILE}"))
    (project / "data").mkdir()
    (project / "data" / "a.txt").write_text("a\n")
    (project / "runs" / "old-1").mkdir(parents=True)
    (project / "runs" / "old-1" / "rank0.log").write_text("an earlier local run\n")
    code_root = tmp_path / "code"
    write_profile(project, cluster_ssh, code_root, tmp_path / "remote-home")
    proc = hl("submit", "job.yaml", "--remote", "--test-only", cwd=str(project))
    assert "copied 3 files" in proc.stderr and f"preflight passed on {PROFILE}" in proc.stdout, proc.stdout + proc.stderr
    [code_dir] = _code_dirs(code_root)
    shipped = sorted(os.path.relpath(os.path.join(d, f), code_root / code_dir)
                     for d, _, files in os.walk(code_root / code_dir) for f in files)
    assert shipped == [".hpclaunch-code", "data/a.txt", f"hpc_profiles/{PROFILE}.yaml", "job.yaml"], shipped
    assert hl("list", "--all", "--json", cwd="/").stdout.strip() == "[]"   # --test-only queued nothing


def test_the_dashboard_follows_a_remote_job_through_ssh(cluster_ssh, hpc_home, runtime_dir, tmp_path):
    """The dashboard's board refreshes a --remote job's state from the login node (one ssh per
    refresh), from RUNNING to COMPLETED, with no error, as `status` would."""
    from hpclaunch.dashboard.board import Board
    project = make_project(tmp_path)
    write_profile(project, cluster_ssh, tmp_path / "code", tmp_path / "remote-home")
    subprocess.run(["git", "-C", str(project), "add", "hpc_profiles"], check=True)
    (project / "job.yaml").write_text(JOB.replace('HOLD: "4"', 'HOLD: "8"'))
    sub = json.loads(hl("submit", "job.yaml", "--remote", PROFILE, "--json", cwd=str(project)).stdout)
    board = Board(since_s=3600, refresh_s=0)
    seen = []
    deadline = time.time() + 180
    while time.time() < deadline:
        listed = board.rows()
        [row] = [r for r in listed["jobs"] if r["job_id"] == sub["job_id"]]
        assert listed["error"] == "" and row["backend"] == "remote", listed
        if not seen or seen[-1] != row["state"]:
            seen.append(row["state"])
        if state_of(row["state"]).final:
            break
        time.sleep(1)
    assert "RUNNING" in seen and seen[-1] == "COMPLETED", seen
    assert row["source"] == "remote" and "c[1-2]" in row["nodes"], row


# --- each ssh failure: one line, its own exit code, nothing copied or recorded --------------------

def _fails(project, code_root, name, code, *words):
    proc = hl("submit", "job.yaml", "--remote", name, cwd=str(project), check=False, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, f"exit {proc.returncode}:\n{proc.stderr}"
    assert all(w in lines[0] for w in words), lines[0]
    assert lines[0].startswith(f"hpc_profiles/{name}.yaml: remote {name}"), lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not os.path.exists(code_root)
    assert hl("list", "--all", "--json", cwd="/").stdout.strip() == "[]"
    return lines[0]


@pytest.fixture
def failing(cluster_ssh, hpc_home, runtime_dir, tmp_path):
    project = make_project(tmp_path)
    code_root = tmp_path / "code"

    def profile(name, **kw):
        write_profile(project, cluster_ssh, code_root, tmp_path / "remote-home", name=name, **kw)
        return name

    return project, code_root, profile


def test_unknown_host_key_is_refused_with_how_to_add_it(failing, cluster_ssh, monkeypatch, tmp_path):
    project, code_root, profile = failing
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    use_known_hosts(cluster_ssh, monkeypatch, str(empty))
    _fails(project, code_root, profile("no-key-known"), 78,
                  "host key is not known here", f"ssh-keyscan -p 22 c1 >> {empty}")
    assert empty.read_text() == ""   # never accepted silently


def test_a_changed_host_key_is_refused(failing, cluster_ssh, monkeypatch, tmp_path):
    project, code_root, profile = failing
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                           capture_output=True)
    assert other.returncode == 0
    kind, blob = (tmp_path / "other.pub").read_text().split()[:2]
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"c1 {kind} {blob}\n")
    use_known_hosts(cluster_ssh, monkeypatch, str(wrong))
    _fails(project, code_root, profile("key-changed"), 78, "host key has CHANGED",
           "ssh-keygen -R c1")


def test_authentication_failure(failing, tmp_path):
    project, code_root, profile = failing
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "wrong")], check=True)
    _fails(project, code_root, profile("wrong-key", key=str(tmp_path / "wrong")), 77, "authentication failed",
           "Permission denied")


def test_a_name_that_does_not_resolve(failing):
    project, code_root, profile = failing
    _fails(project, code_root, profile("no-such-host", host="root@no-such-host.invalid"), 68,
           "host name no-such-host.invalid does not resolve")


def test_a_port_where_nothing_listens(failing):
    project, code_root, profile = failing
    _fails(project, code_root, profile("refused", port=2), 69, "cannot reach c1 port 2 (Connection refused)")


def test_an_address_that_never_answers_times_out(failing):
    # 10.200.0.99: on the test cluster's own bridge, where no node has that address (ConnectTimeout 3 s).
    project, code_root, profile = failing
    start = time.monotonic()
    _fails(project, code_root, profile("black-hole", host="root@10.200.0.99"), 69, "cannot reach 10.200.0.99 port 22")
    assert time.monotonic() - start < 30


def test_remote_hpclaunch_missing(failing):
    project, code_root, profile = failing
    _fails(project, code_root, profile("no-hpclaunch", command="/nonexistent/bin/hpclaunch"), 79,
           "the hpclaunch command does not run there", "/nonexistent/bin/hpclaunch", "remote.command")


def test_remote_hpclaunch_of_another_version(failing, tmp_path):
    # The one fake here: a remote command that answers another version (the check is about our string).
    project, code_root, profile = failing
    old = tmp_path / "old-hpclaunch"
    old.write_text("#!/bin/sh\necho 'hpclaunch 0.0.1'\n")
    old.chmod(0o755)
    from hpclaunch.common.version import __version__
    _fails(project, code_root, profile("old-version", command=str(old)), 80,
           f"the cluster runs hpclaunch 0.0.1, this machine {__version__}")


def test_remote_errors_are_relayed_with_the_remote_exit_code(cluster_ssh, hpc_home, runtime_dir, tmp_path):
    project = make_project(tmp_path)
    (project / "job.yaml").write_text(JOB.replace("nodes: 2", "nodes: 0"))
    write_profile(project, cluster_ssh, tmp_path / "code", tmp_path / "remote-home")
    proc = hl("submit", "job.yaml", "--remote", PROFILE, cwd=str(project), check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[-1].startswith(f"remote {PROFILE} (root@c1): job.yaml: resources.nodes: must be at least 1"), lines
    assert hl("list", "--all", "--json", cwd="/").stdout.strip() == "[]"


def test_a_remote_exit_255_or_signal_is_the_commands_not_an_ssh_failure(cluster_ssh, runtime_dir, tmp_path):
    # ssh exits 255 for its own failures and for a remote exit 255; a command exec'd remotely and
    # killed by a signal makes it exit 255 too. Both must come back as the command's end.
    from hpclaunch.runs.remote_ssh import RemoteError, SshSession
    from hpclaunch.spec.remote import Remote

    options = {"IdentityFile": cluster_ssh["key"], "IdentitiesOnly": "yes"}
    session = SshSession(Remote(host="root@c1", code_root=str(tmp_path), ssh_options=options, connect_timeout=5),
                         PROFILE, "test")
    streamed = []
    code, out, err = session.call("echo out; echo err >&2; exit 255", err=streamed.append)
    assert (code, out, "".join(streamed)) == (255, "out\n", "err\n")   # the mark taken out of what streams
    assert session.call("exit 255") == (255, "", "")
    code, _, err = session.call("sh -c 'kill -9 $$'")
    assert code == 137, err
    assert session.call("set -e; false; echo not here")[0] == 1
    # a real ssh failure still reads as one
    lost = SshSession(Remote(host="root@c1", port=1, code_root=str(tmp_path), ssh_options=options,
                             connect_timeout=3), PROFILE, "test")
    with pytest.raises(RemoteError) as failure:
        lost.call("exit 255")
    assert failure.value.exit_code == 69 and "cannot reach c1 port 1" in str(failure.value)


def test_the_options_a_profile_may_set_work_against_the_real_sshd(cluster_ssh, runtime_dir, tmp_path):
    # Every option spec/ssh_options.py allows that this sshd can honour, at once (issue 44): the login
    # through the bastion c2 (ProxyJump, a hop checked like remote.host), the user and key from the options.
    from hpclaunch.runs.remote_ssh import SshSession
    from hpclaunch.spec.profiles import load_profile
    options = {"User": "root", "IdentityFile": cluster_ssh["key"], "IdentitiesOnly": "yes", "HostKeyAlias": "c1",
               "ProxyJump": "ssh://root@c2:22", "PubkeyAuthentication": "yes", "PasswordAuthentication": "no",
               "KbdInteractiveAuthentication": "no", "ChallengeResponseAuthentication": "no",
               "GSSAPIAuthentication": "no", "PreferredAuthentications": "publickey", "NumberOfPasswordPrompts": "0",
               "BatchMode": "yes", "ServerAliveInterval": "10", "ServerAliveCountMax": "3", "TCPKeepAlive": "yes",
               "ConnectionAttempts": "2", "AddressFamily": "inet", "Compression": "yes",
               "Ciphers": "aes256-gcm@openssh.com", "MACs": "hmac-sha2-256", "KexAlgorithms": "curve25519-sha256",
               "HostKeyAlgorithms": "ssh-ed25519", "PubkeyAcceptedAlgorithms": "ssh-ed25519"}
    profile = tmp_path / "jump.yaml"
    profile.write_text("name: jump\nextends: testcluster\nremote: " + json.dumps(
        {"host": "c1", "code_root": str(tmp_path / "code"), "ssh_options": options, "connect_timeout": 5}) + "\n")
    remote = load_profile(str(profile)).profile.remote     # the profile validates as written
    session = SshSession(remote, "jump", str(profile))
    code, out, err = session.call('hostname; echo "$SSH_CONNECTION"; id -un')
    host, connection, user = out.split("\n")[:3]
    assert code == 0 and host == "c1" and user == "root", (out, err)
    assert connection.split()[0] == "10.200.0.12", connection   # it came from c2: the jump was taken
