"""The ssh options a profile's `remote.ssh_options` may set, and the values each takes (docs/remote.md).

A profile comes from a project folder (./hpc_profiles/) or a colleague as often as from the user.
Whatever it says, ssh must not run or load code here (ProxyCommand, LocalCommand, KnownHostsCommand,
PKCS11Provider, SecurityKeyProvider, ...), hand anything of this machine's to the other side (the
agent, X11, Kerberos tickets, environment variables, ports), connect elsewhere than remote.host
says, trust host keys other than the user's own known_hosts, or take what hpclaunch owns (the
multiplexed connection, host key checking, the terminal, the remote command). So options are
allowed by name, each with a check of its value: a deny-list misses the option nobody listed.
What a profile may not set belongs in the user's own ~/.ssh/config, which ssh reads as always.

ssh reads option names in any case (`identityfile`), so names are matched case-insensitively; a name
is one word (`Name=value` or `Name value` as a key is no ssh option name here), and a value is one
argument of `-o Name=value` (remote_ssh.py): its check keeps it to one token of the option's syntax.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, Optional, Tuple

Problem = Optional[Tuple[str, str]]          # (what is wrong, the fix), or None
_Check = Callable[[str], Problem]

# The destination's grammar (spec/remote.py uses these too): never a leading '-', which ssh would
# read as an option, and nothing a shell would act on (ssh runs a ProxyJump as `sh -c "ssh ... HOST"`).
USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
HOST = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}"
DESTINATION = re.compile(rf"(?:{USER}@)?{HOST}")
_HOP = re.compile(rf"(?:ssh://)?(?:({USER})@)?({HOST})(?::(\d{{1,5}}))?")
_ALGORITHMS = re.compile(r"[+^-]?[A-Za-z0-9@._-]{1,100}(?:,[A-Za-z0-9@._-]{1,100}){0,63}")
_AUTH_METHODS = {"gssapi-with-mic", "hostbased", "publickey", "keyboard-interactive", "password"}
MAX_HOPS = 8
_FLAGS = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}


def _flag(text: str) -> Problem:
    return None if text.lower() in _FLAGS else ("must be yes or no", "write yes or no")


def _number(low: int, high: int) -> _Check:
    def check(text: str) -> Problem:
        if not text.isdigit() or not low <= int(text) <= high:
            return (f"must be a whole number from {low} to {high}", f"e.g. {max(low, min(high, 4))}")
        return None
    return check


def _choice(*words: str) -> _Check:
    def check(text: str) -> Problem:
        return None if text.lower() in words else (f"must be one of {', '.join(words)}", f"write one of "
                                                   f"{', '.join(words)}")
    return check


def _path(text: str, none_ok: bool = True) -> Problem:
    # %-tokens and ${VAR} are expanded by ssh from its own view of the connection and environment: a
    # key file is a path here, what it names is what it is.
    if none_ok and text == "none":
        return None
    if any(c in text for c in '%$"\\'):
        return ("must be a plain path (no %-tokens, $ variables, quotes or backslashes)", "write the file's path, e.g. "
                "~/.ssh/id_cluster")
    if not (text.startswith("/") or text.startswith("~/")):
        return ("must be absolute or start with ~/ (a relative path names another file from each folder "
                "hpclaunch runs in)", "e.g. ~/.ssh/id_cluster")
    return None


def _user(text: str) -> Problem:
    return None if re.fullmatch(USER, text) else ("is not a user name", "use letters, digits and . _ -")


def _host(text: str) -> Problem:
    return None if re.fullmatch(HOST, text) else ("is not a host name", "use letters, digits and . _ -")


def _jump(text: str) -> Problem:
    """ProxyJump: `none`, or up to MAX_HOPS hops `[ssh://][user@]host[:port]`, each checked as the
    destination is."""
    if text == "none":
        return None
    hops = text.split(",")
    if len(hops) > MAX_HOPS:
        return (f"has more than {MAX_HOPS} hops", "name the bastions the login node needs")
    for hop in hops:
        m = _HOP.fullmatch(hop)
        if not m or (m.group(3) and not 1 <= int(m.group(3)) <= 65535):
            return (f"hop {hop!r} is not an ssh destination", "write [user@]host[:port] (or ssh://[user@]host"
                    "[:port]), hops separated by commas, e.g. me@bastion.cluster.org")
    return None


def _algorithms(text: str) -> Problem:
    return None if _ALGORITHMS.fullmatch(text) else (
        "is not a list of algorithm names", "write names separated by commas, optionally after + - or ^, "
        "e.g. +ssh-rsa")


def _auth_methods(text: str) -> Problem:
    bad = [m for m in text.split(",") if m not in _AUTH_METHODS]
    return (f"names no authentication method {bad[0]!r}", f"write some of {', '.join(sorted(_AUTH_METHODS))}, "
            "separated by commas") if bad else None


# Each option a profile may set: its spelling, its check, and why a login-node user needs it.
ALLOWED: Dict[str, Tuple[str, _Check, str]] = {name.lower(): (name, check, why) for name, check, why in [
    ("User", _user, "the login name on the cluster (or write remote.host as user@host)"),
    ("IdentityFile", _path, "the key for this cluster"),
    ("CertificateFile", lambda t: _path(t, none_ok=False), "a certificate a site signs for the key "
     "(short-lived keys, e.g. NERSC's sshproxy)"),
    ("IdentitiesOnly", _flag, "offer only that key (an agent with many keys runs into MaxAuthTries)"),
    ("PubkeyAuthentication", _flag, "the site's login methods"),
    ("PasswordAuthentication", _flag, "the site's login methods"),
    ("KbdInteractiveAuthentication", _flag, "the site's login methods (one-time passwords)"),
    ("ChallengeResponseAuthentication", _flag, "the older name of KbdInteractiveAuthentication"),
    ("GSSAPIAuthentication", _flag, "Kerberos logins, common on clusters (the ticket is not forwarded)"),
    ("PreferredAuthentications", _auth_methods, "the order the login methods are tried in"),
    ("NumberOfPasswordPrompts", _number(0, 10), "with BatchMode no"),
    ("BatchMode", _flag, "no: ssh may ask for a password, passphrase or one-time code"),
    ("HostKeyAlias", _host, "the name the login node's key is found under in your own known_hosts (login "
     "nodes sharing one key, a tunnel): it only chooses among keys you trust"),
    ("ProxyJump", _jump, "the site's bastion: each hop is checked as remote.host is"),
    ("ServerAliveInterval", _number(0, 3600), "keep-alive through firewalls that drop idle connections"),
    ("ServerAliveCountMax", _number(1, 100), "keep-alive"),
    ("TCPKeepAlive", _flag, "keep-alive"),
    ("ConnectionAttempts", _number(1, 10), "a login node behind a flaky network"),
    ("AddressFamily", _choice("any", "inet", "inet6"), "a site reachable over one address family only"),
    ("Compression", _flag, "a slow link"),
    ("Ciphers", _algorithms, "an old login node's sshd"),
    ("MACs", _algorithms, "an old login node's sshd"),
    ("KexAlgorithms", _algorithms, "an old login node's sshd"),
    ("HostKeyAlgorithms", _algorithms, "an old login node's sshd (+ssh-rsa)"),
    ("PubkeyAcceptedAlgorithms", _algorithms, "an old login node's sshd (+ssh-rsa)"),
    ("PubkeyAcceptedKeyTypes", _algorithms, "the older name of PubkeyAcceptedAlgorithms"),
]}

_CODE = "a profile does not make ssh run or load code here"
_SENDS = "a profile does not hand this machine's credentials, environment or ports to the other side"
_TRUST = ("host keys are checked against your own known_hosts only: a file another user can write would "
          "vouch for any host; set it in ~/.ssh/config if it is yours")
# Options refused with a reason of their own (anything else not allowed gets the general one).
REFUSED: Dict[str, str] = {
    **dict.fromkeys(["proxycommand"], _CODE + ": use ProxyJump, or set ProxyCommand for this host in "
                    "~/.ssh/config"),
    **dict.fromkeys(["localcommand", "permitlocalcommand", "knownhostscommand", "pkcs11provider",
                     "smartcarddevice", "securitykeyprovider", "xauthlocation", "proxyusefdpass",
                     "hostbasedauthentication", "enablesshkeysign", "match", "include", "host"],
                    _CODE + "; set it in ~/.ssh/config if you trust it"),
    **dict.fromkeys(["forwardagent", "forwardx11", "forwardx11trusted", "forwardx11timeout",
                     "gssapidelegatecredentials", "sendenv", "localforward", "remoteforward",
                     "dynamicforward", "tunnel", "tunneldevice", "gatewayports", "identityagent",
                     "addkeystoagent", "streamlocalbindunlink", "streamlocalbindmask"], _SENDS),
    "setenv": "use remote.env: the remote hpclaunch's environment",
    "hostname": "remote.host is where hpclaunch connects: write the login node there (or a Host of your "
                "~/.ssh/config)",
    "port": "write it as remote.port",
    "connecttimeout": "write it as remote.connect_timeout",
    **dict.fromkeys(["userknownhostsfile", "globalknownhostsfile", "revokedhostkeys", "verifyhostkeydns",
                     "updatehostkeys", "hashknownhosts", "checkhostip", "canonicalizehostname",
                     "canonicaldomains", "canonicalizefallbacklocal", "canonicalizemaxdots",
                     "canonicalizepermittedcnames"], _TRUST),
    "stricthostkeychecking": "hpclaunch never accepts an unknown host key: add the key to known_hosts "
                             "(docs/remote.md)",
    "controlmaster": "hpclaunch multiplexes one connection per command itself",
    "controlpath": "hpclaunch keeps its control sockets in a private folder",
    "controlpersist": "hpclaunch keeps its connection open a short while itself",
    "remotecommand": "hpclaunch chooses the remote command",
    "requesttty": "a terminal would corrupt the copied files and the JSON answers",
    "sessiontype": "hpclaunch runs commands on the login node",
    "stdinnull": "hpclaunch sends the project on stdin",
    "forkafterauthentication": "hpclaunch waits for every remote command",
    "loglevel": "hpclaunch reads ssh's messages to say what failed",
    "escapechar": "hpclaunch's sessions have no terminal",
}


def name_problem(name: str) -> Problem:
    """(what is wrong, the fix) when a profile may not set the option `name` (in any case)."""
    key = name.lower()
    if key in REFUSED:
        return ("cannot be set in a profile", REFUSED[key])
    if key not in ALLOWED:
        import difflib   # only for a refusal: every profile load imports this module
        near = difflib.get_close_matches(key, list(ALLOWED), n=1, cutoff=0.8)
        hint = f"did you mean {ALLOWED[near[0]][0]!r}? " if near else ""
        return ("cannot be set in a profile", f"{hint}a profile may set only the options docs/remote.md lists; "
                "set others for this host in ~/.ssh/config")
    return None


def value_problem(name: str, value: Any) -> Problem:
    """(what is wrong, the fix) when `value` is not one the allowed option `name` takes."""
    return ALLOWED[name.lower()][1](str(value))
