"""One ssh connection per hpclaunch command to a cluster's login node, and what its failures mean.

Every remote call of one command goes through one `SshSession`: ssh's ControlMaster=auto makes the
first call the master and every later call a client of it, through a socket in a private (0700)
folder; ControlPersist keeps it a short while so the next command can reuse it. The socket's name
is a hash of everything that decides how ssh connects (destination, port, options), so a session
with other options (another key) never rides on a connection that was authenticated differently.

ssh's own failures (exit 255) become one line each, with a distinct exit code (README, "Exit codes"):
an unknown or changed host key (never accepted silently: StrictHostKeyChecking=yes), failed
authentication, a name that does not resolve, a host that does not answer; and the remote hpclaunch
missing or of another version than this one.
"""
from __future__ import annotations

import codecs
import hashlib
import os
import pwd
import re
import shlex
import stat
import subprocess
import sys
import threading
from typing import Callable, List, Optional, Tuple

from hpclaunch.common.errors import HpclaunchError, Problem
from hpclaunch.common.privatedir import private_dir
from hpclaunch.common.version import __version__
from hpclaunch.runs.registry import home
from hpclaunch.spec.remote import entry_problems

# Exit codes of the failures below: sysexits(3) where one fits (hpclaunch already uses EX_TEMPFAIL, 75).
EXIT_NO_HOST = 68         # EX_NOHOST: the host name does not resolve
EXIT_UNREACHABLE = 69     # EX_UNAVAILABLE: nothing answers (refused, timed out, no route)
EXIT_SSH = 76             # EX_PROTOCOL: ssh failed otherwise (connection closed, ...)
EXIT_AUTH = 77            # EX_NOPERM: authentication failed
EXIT_HOST_KEY = 78        # EX_CONFIG: the host key is unknown or changed: known_hosts needs the user
EXIT_NO_HPCLAUNCH = 79    # the remote hpclaunch command is missing or does not run
EXIT_VERSION = 80         # the remote hpclaunch is another version

# ssh exits 255 for its own failures and when the remote command exits 255. The remote shell writes
# this mark on stderr when its command did, so the two are told apart (it is taken out of the output).
EXIT_255_MARK = "\x1ehpclaunch-remote-exit-255\x1e\n"
_TRAILER = 'rc=$?; if [ "$rc" -eq 255 ]; then printf \'\\036hpclaunch-remote-exit-255\\036\\n\' >&2; fi; exit "$rc"'

SSH_CONFIG_ENV = "HPCLAUNCH_SSH_CONFIG"
# ssh writes the -F path unquoted into the `sh -c` command it makes of a ProxyJump: a plain path only.
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9/._+-]{1,500}")
CONTROL_PERSIST_S = 30    # long enough for the next command typed, short enough to leave nothing behind
_SOCKET_MAX = 90          # sun_path holds 108 bytes; ssh binds `<path>.<16 random chars>` first


class RemoteError(HpclaunchError):
    """A failure reaching or running the remote hpclaunch: one line, its own exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def control_dir() -> str:
    """Where the control sockets live: the user's runtime folder ($XDG_RUNTIME_DIR, a per-user
    tmpfs), else hpclaunch's state folder (the registry's), else a short private folder in /tmp
    when those paths are too long for a socket."""
    candidates = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        candidates.append(os.path.join(runtime, "hpclaunch-ssh"))
    candidates.append(os.path.join(home(), "ssh"))
    candidates.append(os.path.join("/tmp", f"hpclaunch-ssh-{os.getuid()}"))
    for path in candidates:
        # ssh expands %-tokens, ${VAR} and ~ in ControlPath: a folder named with them is skipped
        if len(path) + 17 <= _SOCKET_MAX and not set("%$~") & set(path) and private_dir(path):
            return path
    raise HpclaunchError(f"cannot make a private folder for ssh's control socket (tried {', '.join(candidates)})"
                         " \u2014 set $XDG_RUNTIME_DIR to a short folder only you can use")


def ssh_config() -> List[str]:
    """`-F FILE` when the user's environment names an ssh config file for hpclaunch (HPCLAUNCH_SSH_CONFIG,
    docs/environment.md): the user's own settings, which a profile may not make (spec/ssh_options.py),
    e.g. another known_hosts file. ssh then reads it instead of ~/.ssh/config."""
    path = os.environ.get(SSH_CONFIG_ENV, "").strip()
    if not path:
        return []
    if not _PLAIN_PATH.fullmatch(path):
        raise HpclaunchError(f"{SSH_CONFIG_ENV}={path!r}: must be an absolute path of letters, digits and / . _ + - "
                             f"— name the ssh config file by such a path, or unset {SSH_CONFIG_ENV}")
    if not os.path.isfile(path):
        raise HpclaunchError(f"{SSH_CONFIG_ENV}={path!r}: is not a file — name an ssh config file "
                             f"(ssh_config(5)), or unset {SSH_CONFIG_ENV}")
    return ["-F", path]


def _home() -> str:
    """The home folder ssh expands ~ to: the password database's, not $HOME."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def _key_files(remote, source: str) -> None:
    """The key and certificate files a profile names are regular files where they exist: ssh opens a
    FIFO or a device there (and beside it: .pub, -cert, -cert.pub) and waits forever, whatever the
    connect timeout. A missing one is ssh's to report (the login then fails: exit 77)."""
    home = _home()
    for key, value in (remote.ssh_options or {}).items():
        if key.lower() not in ("identityfile", "certificatefile") or value == "none":
            continue
        path = os.path.join(home, value[2:]) if value.startswith("~/") else value
        for name in (path, path + ".pub", path + "-cert", path + "-cert.pub"):
            try:
                mode = os.stat(name).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                raise HpclaunchError(str(Problem(source, f"remote.ssh_options.{key}", f"{name} is not a regular file "
                                                 "(ssh would wait on it forever)", value, "name your key file")))


def _option(name: str, value: str) -> List[str]:
    # ssh splits an -o line at whitespace unless quoted; values never hold '"' (spec/ssh_options.py).
    return ["-o", f'{name}="{value}"' if any(c.isspace() for c in value) else f"{name}={value}"]


class SshSession:
    """The connection of one command to one remote. `remote` is a spec.remote.Remote; `name` the
    profile that holds it; `source` the file it came from, for messages."""

    def __init__(self, remote, name: str, source: str):
        self.remote, self.name, self.source = remote, name, source
        for where, message, value, fix in entry_problems(remote):   # checked where it was read; never unchecked
            raise HpclaunchError(str(Problem(source, where, message, value, fix)))
        _key_files(remote, source)
        self.destination = remote.host
        self.host = remote.host.rpartition("@")[2]
        self._checked = False
        self._config: Optional[dict] = None   # ssh -G's answer, asked after a failure only
        options: List[str] = ssh_config()
        # Sorted: the registry keeps the settings with sorted keys, so a later command builds the same
        # command line (and control socket name) as submit did, and can reuse its connection.
        # before ours: ssh keeps the first value (spec/ssh_options.py keeps what a profile may set)
        for key, value in sorted((remote.ssh_options or {}).items()):
            options += _option(key, str(value))
        identity = repr((self.destination, remote.port, options)).encode()
        self.control_path = os.path.join(control_dir(), hashlib.sha256(identity).hexdigest()[:16])
        options += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
                    "-o", f"ControlPersist={CONTROL_PERSIST_S}", "-o", "StrictHostKeyChecking=yes",
                    "-o", "BatchMode=yes", "-o", f"ConnectTimeout={remote.connect_timeout}",
                    "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
        if remote.port:
            options += ["-p", str(remote.port)]
        self._argv = ["ssh", *options, "--", self.destination]

    # --- the remote shell ------------------------------------------------------------------------

    def script(self, body: str) -> str:
        """`body` (one line of POSIX shell) with the remote env exported, run by sh whatever the login
        shell is. Every value in it is quoted by the caller (shlex.quote). sh stays to report how the
        body ended: its exit code, 128+N for a command killed by signal N (an exec'd command killed
        by a signal makes ssh exit 255, like a failed connection), and the mark for an exit 255."""
        exports = "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in (self.remote.env or {}).items())
        return "exec sh -c " + shlex.quote(f"{exports}({body}); {_TRAILER}")  # ( ): a `set -e` stays in

    def hpclaunch_words(self, *args: str) -> str:
        return " ".join(shlex.quote(w) for w in [*self.remote.command, *args])

    # --- calls -----------------------------------------------------------------------------------

    def call(self, body: str, *, feed: Optional[Callable] = None, out: Optional[Callable[[str], None]] = None,
             err: Optional[Callable[[str], None]] = None) -> Tuple[int, str, str]:
        """Run `body` remotely: (exit code, stdout, stderr). `feed(stdin)` writes the call's stdin;
        `out`/`err` receive the remote's output as it comes (then it is not kept). ssh's own failures
        raise RemoteError."""
        try:
            proc = subprocess.Popen(self._argv + [self.script(body)], stdin=subprocess.PIPE if feed else
                                    subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise RemoteError(f"{self.source}: remote {self.name}: ssh is not installed here \u2014 install an "
                              "OpenSSH client (apt-get install openssh-client)", EXIT_SSH) from None
        kept_out: List[str] = []
        kept_err: List[str] = []
        mark = _Exit255Mark()
        pumps = [threading.Thread(target=_pump, args=(proc.stdout, out, kept_out), daemon=True),
                 threading.Thread(target=_pump, args=(proc.stderr, err, kept_err, 64, mark), daemon=True)]
        for t in pumps:
            t.start()
        fed_error: Optional[BaseException] = None
        if feed:
            try:
                feed(proc.stdin)
            except BrokenPipeError:
                pass  # the remote side ended early: its exit code and stderr say why
            except BaseException as e:  # noqa: BLE001 - stop the remote, then report the cause
                fed_error = e
                proc.kill()
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            raise
        for t in pumps:
            t.join()
        if fed_error is not None:
            raise fed_error
        stderr = "".join(kept_err)
        if code == 255 and not mark.seen:
            raise self.failure(stderr)
        return code, "".join(kept_out), stderr

    def failure(self, stderr: str) -> RemoteError:
        """ssh's exit 255 as the user's one line: what failed and what to do about it."""
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else "no message"
        text = " ".join(lines)
        where = f"{self.source}: remote {self.name}: ssh {self.destination}"
        port = self.remote.port or 22
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key for" in text and "has changed" in text:
            return RemoteError(f"{where}: the login node's host key has CHANGED since it was added to known_hosts "
                               "(a reinstalled node, or someone in between) \u2014 confirm the new key with your "
                               f"site, then remove the old one: ssh-keygen -R {self._keyscan_host()}"
                               f"{self._known_hosts_flag()}", EXIT_HOST_KEY)
        if "Host key verification failed" in text or "host key is known for" in text:
            return RemoteError(f"{where}: the login node's host key is not known here (hpclaunch never accepts "
                               "an unknown key) \u2014 check its fingerprint with your site, then add it: "
                               f"ssh-keyscan -p {port} {self._keyscan_host()} >> {self._known_hosts()}",
                               EXIT_HOST_KEY)
        if "Permission denied" in text or "Too many authentication failures" in text:
            return RemoteError(f"{where}: authentication failed ({last}) \u2014 check the user in remote.host "
                               "and the key (ssh_options IdentityFile in the profile, or ssh-add), and that "
                               f"the cluster has its public key (ssh-copy-id {self.destination})", EXIT_AUTH)
        m = re.search(r"Could not resolve hostname (\S+): ([^\n]*)", stderr)
        if m:
            return RemoteError(f"{where}: host name {m.group(1).rstrip(':')} does not resolve ({m.group(2).strip()})"
                               " \u2014 check remote.host in the profile (or the Host entry in ~/.ssh/config), "
                               "and your network or VPN", EXIT_NO_HOST)
        m = re.search(r"connect to host (\S+) port (\d+): ([^\n]*)", stderr) or \
            re.search(r"(Connection timed out during banner exchange|Network is unreachable|No route to host)",
                      stderr)
        if m:
            why = m.group(3).strip() if m.lastindex and m.lastindex >= 3 else m.group(1)
            return RemoteError(f"{where}: cannot reach {self.host} port {port} ({why}) \u2014 check remote.host "
                               "and remote.port in the profile, your network or VPN, and that the login node "
                               "is up", EXIT_UNREACHABLE)
        return RemoteError(f"{where}: the connection failed ({last}) \u2014 run `ssh {self.destination} true` "
                           "to see why", EXIT_SSH)

    def _resolved(self, key: str) -> Optional[str]:
        """The first word of what ssh makes of `key` for this connection (`ssh -G`: the profile's options
        and the user's own config), for the advice after a failure; None when ssh cannot say."""
        if self._config is None:
            self._config = {}
            try:
                res = subprocess.run(["ssh", "-G", *self._argv[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                                     text=True, timeout=10)
            except (OSError, subprocess.SubprocessError):
                res = None
            if res is not None and res.returncode == 0:
                self._config = dict(ln.split(" ", 1) for ln in res.stdout.splitlines() if " " in ln)
        words = self._config.get(key, "").split()
        return words[0] if words else None

    def _known_hosts(self) -> str:
        return shlex.quote(self._resolved("userknownhostsfile") or "~/.ssh/known_hosts")

    def _known_hosts_flag(self) -> str:
        path = self._known_hosts()
        default = os.path.join(_home(), ".ssh", "known_hosts")
        return "" if path in ("~/.ssh/known_hosts", default) else f" -f {path}"

    def _keyscan_host(self) -> str:
        return self._resolved("hostkeyalias") or self.host

    # --- the remote hpclaunch --------------------------------------------------------------------

    def check_hpclaunch(self) -> None:
        """The remote hpclaunch runs and is this one's version (once per session): a version skew
        would read each other's JSON and registry wrongly."""
        if self._checked:
            return
        code, out, err = self.call(self.hpclaunch_words("--version"))
        where = f"{self.source}: remote {self.name} ({self.destination})"
        words = " ".join(self.remote.command)
        if code in (126, 127):
            why = _last_line(err) or f"exit {code}"
            raise RemoteError(f"{where}: the hpclaunch command does not run there ({why}) \u2014 install hpclaunch "
                              f"{__version__} on the cluster (pip install hpclaunch=={__version__}), or set "
                              "remote.command in the profile to its path", EXIT_NO_HPCLAUNCH)
        answer = out.strip()
        if code != 0 or not answer.startswith("hpclaunch "):
            why = _last_line(err) or answer[:80] or f"exit {code}"
            raise RemoteError(f"{where}: `{words} --version` did not answer with hpclaunch's version ({why}) "
                              "\u2014 set remote.command in the profile to the hpclaunch command there",
                              EXIT_NO_HPCLAUNCH)
        theirs = answer.split()[1] if len(answer.split()) > 1 else answer
        if theirs != __version__:
            raise RemoteError(f"{where}: the cluster runs hpclaunch {theirs}, this machine {__version__} \u2014 "
                              f"install the same version on both (pip install hpclaunch=={__version__} there), "
                              "or point remote.command at a matching one", EXIT_VERSION)
        self._checked = True

    def hpclaunch(self, *args: str, cwd: Optional[str] = None, out=None, err=None) -> Tuple[int, str, str]:
        """Run the remote `hpclaunch ARGS` (in `cwd`), after the version check."""
        self.check_hpclaunch()
        body = ("cd " + shlex.quote(cwd) + " && " if cwd else "") + self.hpclaunch_words(*args)
        return self.call(body, out=out, err=err)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


class _Exit255Mark:
    """Takes EXIT_255_MARK out of the remote's stderr as it streams, noting that it came; a chunk
    may end part-way into it, so a tail that could begin it is held until the next chunk."""

    def __init__(self) -> None:
        self.seen, self._held = False, ""

    def __call__(self, text: str, final: bool = False) -> str:
        text, self._held = self._held + text, ""
        if EXIT_255_MARK in text:
            self.seen, text = True, text.replace(EXIT_255_MARK, "")
        if not final:  # the earliest tail that begins the mark (it holds the separator twice)
            start = text.find(EXIT_255_MARK[0], max(0, len(text) - len(EXIT_255_MARK) + 1))
            while start >= 0 and not EXIT_255_MARK.startswith(text[start:]):
                start = text.find(EXIT_255_MARK[0], start + 1)
            if start >= 0:
                text, self._held = text[:start], text[start:]
        return text


def _pump(pipe, sink: Optional[Callable[[str], None]], kept: List[str], keep_last: int = 0,
          mark: Optional[_Exit255Mark] = None) -> None:
    """Copy a pipe to `sink` as it comes (decoded), or keep it; `keep_last` keeps only the last
    lines' worth of chunks (stderr: enough to classify a failure, never unbounded); `mark` filters
    the text first."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for block in iter(lambda: pipe.read1(65536), b""):
        text = decoder.decode(block)
        if mark is not None:
            text = mark(text)
        if sink is not None:
            sink(text)
            if keep_last:
                kept.append(text)
        else:
            kept.append(text)
        if keep_last and len(kept) > keep_last:
            del kept[: len(kept) - keep_last]
    tail = decoder.decode(b"", final=True)
    if mark is not None:
        tail = mark(tail, final=True)
    if tail:
        (sink or kept.append)(tail)


def write_through(stream) -> Callable[[str], None]:
    """A sink that writes to `stream` (sys.stdout, sys.stderr) and flushes, for live output."""
    def sink(text: str) -> None:
        stream.write(text)
        stream.flush()
    return sink


def stderr_sink() -> Callable[[str], None]:
    return write_through(sys.stderr)
