"""A profile's remote.ssh_options (hpclaunch/spec/ssh_options.py, issue 44 item 2): a profile from a project
folder or a colleague can make ssh neither run or load code here, nor forward anything of this machine's,
nor connect elsewhere or trust other host keys. Options are allowed by name, each value checked; every
refusal is one line of `hpclaunch validate` naming the file, the field, the value and the fix, exit 2.
`ssh -G` (ssh's own reading of the command line hpclaunch builds) shows what the allowed ones do."""
import json
import os
import re
import shutil
import subprocess

import pytest

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.spec.remote import Remote
from hpclaunch.spec.ssh_options import ALLOWED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _validate(run_cli, write, options):
    remote = {"host": "me@login.example.org", "code_root": "/shared/me/code", "ssh_options": options}
    write("hpc_profiles/r.yaml", f"name: r\nextends: local\nnode: {{cpus: 2}}\nremote: {json.dumps(remote)}\n")
    job = write("job.yaml", "name: j\nprofile: hpc_profiles/r.yaml\ncommand: [python, train.py]\n")
    code, out, err = run_cli("validate", job)
    return code, err.strip().splitlines()


# Each option that runs or loads code here, forwards this machine's credentials, environment or ports,
# redirects the connection or its host key trust, or takes what hpclaunch owns, with a value an
# attacker would write; in the spellings ssh reads (any case).
HOSTILE = [
    ("PKCS11Provider", "/tmp/evil.so", "run or load code here"),
    ("pkcs11provider", "/tmp/evil.so", "run or load code here"),
    ("SmartcardDevice", "/tmp/evil.so", "run or load code here"),
    ("SecurityKeyProvider", "/tmp/evil.so", "run or load code here"),
    ("ProxyCommand", "sh -c 'touch /tmp/pwned'", "use ProxyJump"),
    ("PROXYCOMMAND", "nc %h %p", "use ProxyJump"),
    ("LocalCommand", "touch /tmp/pwned", "run or load code here"),
    ("PermitLocalCommand", "yes", "run or load code here"),
    ("KnownHostsCommand", "/bin/sh -c 'touch /tmp/pwned'", "run or load code here"),
    ("Match", "exec \"touch /tmp/pwned\"", "run or load code here"),
    ("Include", "/tmp/evil.conf", "run or load code here"),
    ("XAuthLocation", "/tmp/evil", "run or load code here"),
    ("ProxyUseFdpass", "yes", "run or load code here"),
    ("HostbasedAuthentication", "yes", "run or load code here"),
    ("SendEnv", "*", "credentials, environment or ports"),
    ("sendenv", "AWS_*", "credentials, environment or ports"),
    ("SetEnv", "LD_PRELOAD=/tmp/evil.so", "use remote.env"),
    ("ForwardAgent", "yes", "credentials, environment or ports"),
    ("forwardagent", "/tmp/agent.sock", "credentials, environment or ports"),
    ("ForwardX11", "yes", "credentials, environment or ports"),
    ("ForwardX11Trusted", "yes", "credentials, environment or ports"),
    ("GSSAPIDelegateCredentials", "yes", "credentials, environment or ports"),
    ("IdentityAgent", "/tmp/colleague-agent.sock", "credentials, environment or ports"),
    ("AddKeysToAgent", "yes", "credentials, environment or ports"),
    ("RemoteForward", "2222 localhost:22", "credentials, environment or ports"),
    ("LocalForward", "0.0.0.0:8080 intranet:80", "credentials, environment or ports"),
    ("DynamicForward", "1080", "credentials, environment or ports"),
    ("GatewayPorts", "yes", "credentials, environment or ports"),
    ("Tunnel", "yes", "credentials, environment or ports"),
    ("Hostname", "attacker.example.org", "remote.host is where hpclaunch connects"),
    ("HostName", "attacker.example.org", "remote.host is where hpclaunch connects"),
    ("UserKnownHostsFile", "/tmp/colleague_known_hosts", "your own known_hosts only"),
    ("GlobalKnownHostsFile", "/tmp/colleague_known_hosts", "your own known_hosts only"),
    ("VerifyHostKeyDNS", "yes", "your own known_hosts only"),
    ("UpdateHostKeys", "yes", "your own known_hosts only"),
    ("CanonicalizeHostname", "yes", "your own known_hosts only"),
    ("CanonicalDomains", "attacker.example.org", "your own known_hosts only"),
    ("StrictHostKeyChecking", "no", "never accepts an unknown host key"),
    ("ControlPath", "/tmp/shared.sock", "control sockets in a private folder"),
    ("ControlMaster", "yes", "multiplexes one connection per command"),
    ("ControlPersist", "yes", "keeps its connection open"),
    ("RemoteCommand", "rm -rf ~", "chooses the remote command"),
    ("RequestTTY", "force", "a terminal would corrupt"),
    ("LogLevel", "QUIET", "reads ssh's messages"),
    ("Port", "2222", "remote.port"),
    ("ConnectTimeout", "0", "remote.connect_timeout"),
    # not listed anywhere: the allow-list refuses it all the same
    ("ObscureKeystrokeTiming", "no", "only the options docs/remote.md lists"),
    ("BindInterface", "eth0", "only the options docs/remote.md lists"),
    ("IdentityFlie", "~/.ssh/id", "did you mean 'IdentityFile'?"),
]


@pytest.mark.parametrize("name,value,fix", HOSTILE)
def test_an_option_that_runs_code_forwards_or_redirects_is_refused(run_cli, write, name, value, fix):
    code, lines = _validate(run_cli, write, {name: value})
    assert code == 2 and len(lines) == 1, lines
    line = lines[0]
    assert re.match(rf"\S*hpc_profiles/r\.yaml: remote\.ssh_options\.{name}: cannot be set in a profile ", line), line
    assert repr(value) in line and " \u2014 " in line and fix in line, line


def test_local_command_and_its_permission_are_each_refused(run_cli, write):
    code, lines = _validate(run_cli, write, {"PermitLocalCommand": "yes", "LocalCommand": "touch /tmp/pwned"})
    assert code == 2 and len(lines) == 2, lines
    assert sorted(ln.split(": ")[1] for ln in lines) == ["remote.ssh_options.LocalCommand",
                                                         "remote.ssh_options.PermitLocalCommand"], lines


# Option names that are no option name: ssh's other spellings (`Name=value`, `Name value`, `-o...`) as keys.
@pytest.mark.parametrize("name", ["ProxyCommand=touch /tmp/x", "ProxyCommand touch", "-oProxyCommand",
                                  "IdentityFile\tx", "Identity-File"])
def test_an_option_spelled_as_a_whole_line_is_no_option_name(run_cli, write, name):
    code, lines = _validate(run_cli, write, {name: "x"})
    assert code == 2 and len(lines) == 1 and "is not an ssh option name" in lines[0], lines


@pytest.mark.parametrize("name,value,words", [
    ("ProxyJump", "-oProxyCommand=touch /tmp/x", "is not an ssh destination"),
    ("ProxyJump", "bastion;touch /tmp/x", "is not an ssh destination"),
    ("ProxyJump", "a$(touch /tmp/x)", "is not an ssh destination"),
    ("ProxyJump", "ssh://-oProxyCommand=x", "is not an ssh destination"),
    ("ProxyJump", "ssh://me@bastion:99999", "is not an ssh destination"),
    ("ProxyJump", "bastion,-x", "hop '-x' is not an ssh destination"),
    ("ProxyJump", ",".join(["b"] * 9), "more than 8 hops"),
    ("ProxyJump", "bastion 'x'", "is not an ssh destination"),
    ("IdentityFile", "~/.ssh/%r_key", "no %-tokens"),
    ("IdentityFile", "${HOME}/.ssh/id", "no %-tokens, $ variables"),
    ("IdentityFile", "id_rsa", "must be absolute or start with ~/"),
    ("IdentityFile", "~colleague/.ssh/id", "must be absolute or start with ~/"),
    ("IdentityFile", "/a\\ b", "backslashes"),
    ("CertificateFile", "none", "must be absolute"),
    ("User", "-oProxyCommand=x", "is not a user name"),
    ("User", "me x", "is not a user name"),
    ("HostKeyAlias", "c1 ProxyCommand", "is not a host name"),
    ("IdentitiesOnly", "yes ProxyCommand=x", "must be yes or no"),
    ("BatchMode", "maybe", "must be yes or no"),
    ("ServerAliveInterval", "-1", "from 0 to 3600"),
    ("ServerAliveCountMax", "1e9", "from 1 to 100"),
    ("ConnectionAttempts", "0", "from 1 to 10"),
    ("AddressFamily", "inet5", "must be one of any, inet, inet6"),
    ("HostKeyAlgorithms", "+ssh-rsa ProxyCommand", "is not a list of algorithm names"),
    ("PreferredAuthentications", "publickey,hostbased-evil", "names no authentication method"),
])
def test_allowed_options_take_only_their_values(run_cli, write, name, value, words):
    code, lines = _validate(run_cli, write, {name: value})
    assert code == 2 and len(lines) == 1, lines
    assert f"r.yaml: remote.ssh_options.{name}: " in lines[0] and words in lines[0], lines[0]
    assert repr(value)[:60] in lines[0] and "\u2014" in lines[0], lines[0]


GOOD = {"User": "me", "IdentityFile": "~/.ssh/id cluster", "CertificateFile": "/home/me/.ssh/id-cert.pub",
        "IdentitiesOnly": "yes", "PubkeyAuthentication": "yes", "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no", "ChallengeResponseAuthentication": "no",
        "GSSAPIAuthentication": "yes", "PreferredAuthentications": "gssapi-with-mic,publickey",
        "NumberOfPasswordPrompts": "1", "BatchMode": "yes", "HostKeyAlias": "login.cluster.org",
        "ProxyJump": "ssh://me@bastion.cluster.org:2222,gw_2", "ServerAliveInterval": "30",
        "ServerAliveCountMax": "3", "TCPKeepAlive": "yes", "ConnectionAttempts": "2", "AddressFamily": "inet",
        "Compression": "yes", "Ciphers": "aes256-gcm@openssh.com,aes128-ctr", "MACs": "-hmac-sha1",
        "KexAlgorithms": "^curve25519-sha256", "HostKeyAlgorithms": "+ssh-rsa",
        "PubkeyAcceptedAlgorithms": "+ssh-rsa", "PubkeyAcceptedKeyTypes": "+ssh-rsa"}


def test_every_allowed_option_validates(run_cli, write):
    assert {k.lower() for k in GOOD} == set(ALLOWED)   # a sample for each
    code, lines = _validate(run_cli, write, GOOD)
    assert code == 0 and lines == [], lines


def test_the_docs_list_exactly_the_allowed_options():
    text = open(os.path.join(ROOT, "docs", "remote.md"), encoding="utf-8").read()
    section = text.split("### The ssh options a profile may set", 1)[1].split("\n#", 1)[0]
    rows = [ln for ln in section.split("| option |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]]
    listed = {name.lower() for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert listed == set(ALLOWED), listed ^ set(ALLOWED)


# --- what ssh itself makes of the command line hpclaunch builds ------------------------------------

ssh_missing = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an OpenSSH client")

# What no profile may change, as `ssh -G` prints it (the defaults, or what hpclaunch sets).
SAFE = {"proxycommand": None, "localcommand": None, "permitlocalcommand": "no", "knownhostscommand": None,
        "pkcs11provider": None, "securitykeyprovider": "internal", "forwardagent": "no", "forwardx11": "no",
        "sendenv": None, "setenv": None, "remoteforward": None, "localforward": None, "dynamicforward": None,
        "gssapidelegatecredentials": "no", "tunnel": "false", "stricthostkeychecking": "true",
        "controlmaster": "auto", "requesttty": "auto", "hostname": "login.example.org"}


@ssh_missing
def test_ssh_reads_the_allowed_options_as_meant_and_nothing_dangerous(tmp_path, monkeypatch):
    from hpclaunch.runs.remote_ssh import SshSession
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "empty.cfg").write_text("")   # not this machine's /etc/ssh/ssh_config (SendEnv LANG, ...)
    monkeypatch.setenv("HPCLAUNCH_SSH_CONFIG", str(tmp_path / "empty.cfg"))
    session = SshSession(Remote(host="me@login.example.org", code_root="/c", ssh_options=GOOD), "r", "r.yaml")
    res = subprocess.run(["ssh", "-G", *session._argv[1:]], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    seen = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        seen.setdefault(key, value)
    for key, want in SAFE.items():
        assert seen.get(key) == want, (key, seen.get(key))
    assert seen["identityfile"] == "~/.ssh/id cluster" and seen["user"] == "me"
    assert seen["proxyjump"] == "ssh://me@bastion.cluster.org:2222,gw_2" and seen["hostkeyalias"] == "login.cluster.org"
    assert seen["serveraliveinterval"] == "30" and seen["batchmode"] == "yes"


def test_a_session_never_runs_with_unchecked_options(tmp_path, monkeypatch):
    # The profile loader and the registry reader check the section; the session checks again, so a
    # Remote made any other way cannot reach ssh unchecked.
    from hpclaunch.runs.remote_ssh import SshSession
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(HpclaunchError) as e:
        SshSession(Remote(host="h", code_root="/c", ssh_options={"PKCS11Provider": "/tmp/evil.so"}), "r", "r.yaml")
    assert str(e.value).startswith("r.yaml: remote.ssh_options.PKCS11Provider: cannot be set in a profile")


@pytest.mark.parametrize("value,words", [("relative.cfg", "must be an absolute path"),
                                         ("/tmp/a b", "must be an absolute path"),
                                         ("/tmp/a;touch x", "must be an absolute path"),
                                         ("/nonexistent/ssh.cfg", "is not a file")])
def test_the_users_ssh_config_must_be_a_plain_path_to_a_file(tmp_path, monkeypatch, value, words):
    # ssh writes the -F path unquoted into the shell command it runs for a ProxyJump.
    from hpclaunch.runs.remote_ssh import SshSession
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("HPCLAUNCH_SSH_CONFIG", value)
    with pytest.raises(HpclaunchError) as e:
        SshSession(Remote(host="h", code_root="/c"), "r", "r.yaml")
    assert f"HPCLAUNCH_SSH_CONFIG={value!r}: {words}" in str(e.value) and "\n" not in str(e.value)


def test_the_users_ssh_config_comes_first_and_names_its_own_connection(tmp_path, monkeypatch):
    from hpclaunch.runs.remote_ssh import SshSession
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    plain = SshSession(Remote(host="h", code_root="/c"), "r", "r.yaml")
    config = tmp_path / "ssh.cfg"
    config.write_text("UserKnownHostsFile /tmp/k\n")
    monkeypatch.setenv("HPCLAUNCH_SSH_CONFIG", str(config))
    own = SshSession(Remote(host="h", code_root="/c"), "r", "r.yaml")
    assert own._argv[1:3] == ["-F", str(config)] and own.control_path != plain.control_path


@pytest.mark.parametrize("planted", ["id", "id.pub", "id-cert.pub"])
def test_a_key_file_that_is_a_fifo_is_refused_before_ssh_waits_on_it(tmp_path, monkeypatch, planted):
    # ssh opens IdentityFile (and its .pub, -cert, -cert.pub) and blocks on a FIFO forever, past ConnectTimeout.
    from hpclaunch.runs.remote_ssh import SshSession
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "keys").mkdir()
    if planted != "id":
        (tmp_path / "keys" / "id").write_text("a key\n")
    os.mkfifo(tmp_path / "keys" / planted)
    key = str(tmp_path / "keys" / "id")
    with pytest.raises(HpclaunchError) as e:
        SshSession(Remote(host="h", code_root="/c", ssh_options={"IdentityFile": key}), "r", "r.yaml")
    assert str(e.value).startswith(f"r.yaml: remote.ssh_options.IdentityFile: {tmp_path}/keys/{planted} is not a "
                                   "regular file"), str(e.value)


# --- the other ways settings reach ssh ---------------------------------------------------------------

def test_a_registry_row_with_a_code_loading_option_never_reaches_ssh(hpc_home, run_cli, tmp_path, monkeypatch):
    # The remote jobs' rows keep the settings used; the commands that follow a job read them back and
    # check them as a profile's (a hand-edited or planted row), before any ssh starts.
    from hpclaunch.runs.registry import Registry
    (tmp_path / "bin").mkdir()
    canary = tmp_path / "ssh-ran"
    (tmp_path / "bin" / "ssh").write_text(f"#!/bin/sh\ntouch {canary}\nexit 255\n")
    (tmp_path / "bin" / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    settings = {"host": "me@login.example.org", "code_root": "/c", "ssh_options": {"PKCS11Provider": "/tmp/evil.so"}}
    reg = Registry()
    rec = reg.add(backend="remote", cluster="far", job_id="77", name="j", run_dir="/c/runs/j-77",
                  resolved={"remote": {"name": "far", "source": "far.yaml", "settings": settings}})
    reg.close()
    code, out, err = run_cli("status", rec.job_id)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("registry: job 77: remote.ssh_options.PKCS11Provider: cannot be set in a profile"), lines
    assert not canary.exists()


def test_control_sockets_live_in_a_private_folder_and_are_per_key(tmp_path, monkeypatch):
    # A control socket is a logged-in connection: a folder another user can write is passed over; two
    # keys never share a socket.
    import pathlib
    import tempfile
    from hpclaunch.runs.remote_ssh import SshSession, control_dir
    shared = pathlib.Path(tempfile.mkdtemp(prefix="hl-rt-", dir="/tmp"))   # short: a socket path has 108 bytes
    try:
        (shared / "hpclaunch-ssh").mkdir()
        os.chmod(shared / "hpclaunch-ssh", 0o777)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
        monkeypatch.setenv("HPCLAUNCH_HOME", str(tmp_path / "home"))
        assert control_dir() == str(tmp_path / "home" / "ssh") and os.stat(control_dir()).st_mode & 0o777 == 0o700
        os.chmod(shared / "hpclaunch-ssh", 0o700)
        assert control_dir() == str(shared / "hpclaunch-ssh")
        a, b = (SshSession(Remote(host="h", code_root="/c", ssh_options={"IdentityFile": f"~/.ssh/{k}"}), "r",
                           "r.yaml") for k in ("id_a", "id_b"))
        assert a.control_path != b.control_path and os.path.dirname(a.control_path) == str(shared / "hpclaunch-ssh")
    finally:
        shutil.rmtree(shared)
