"""A profile's `remote:` section: how to reach the cluster's login node from the user's machine
(`hpclaunch submit --remote`, docs/remote.md).

Every value here reaches ssh's command line or the login node's shell. The remote side quotes each
one (shlex), so these checks are not the quoting: they keep each value one printable line of a
bounded size, keep option injection out of the ssh destination (`-oProxyCommand=...` as a host),
and let ssh_options set only what spec/ssh_options.py allows (a profile may come from a colleague).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from dataclasses import dataclass
from hpclaunch.spec.job import looks_secret, runs_root_problem
from hpclaunch.spec.ssh_options import DESTINATION, name_problem, value_problem
from hpclaunch.spec.typedload import Scalar, field, pattern_check

MAX_TEXT = 1024          # a path, an option value, a command word
MAX_ENV_VALUE = 4096
MAX_ENTRIES = 64         # env entries, ssh options, command words
MAX_UPLOAD_LIMIT = 64 << 30

_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_SIZE = re.compile(r"(\d{1,12})([KMG]?)")
_FACTOR = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

def _one_line(value: str, limit: int = MAX_TEXT) -> Optional[Tuple[str, str]]:
    if not value:
        return ("must not be empty", "write a value, or remove the key")
    if len(value) > limit:
        return (f"is longer than {limit} characters", "shorten it")
    if not value.isprintable():
        return ("must be one line of printable text", "remove the newlines and control characters")
    return None


# [user@]host: a name from ~/.ssh/config, a DNS name or an IPv4 address (spec/ssh_options.py).
_destination = pattern_check(DESTINATION, "is not an ssh destination", "write [user@]host with letters, digits "
                             "and . _ - (a name from ~/.ssh/config works too), e.g. me@login.cluster.org")


def _code_root(value: str) -> Optional[Tuple[str, str]]:
    found = _one_line(value)
    if found:
        return found
    if value.startswith("~"):
        return ("starts with '~', which is not expanded here",
                "write it relative to your home on the cluster (e.g. hpclaunch-code) or absolute")
    return None


def _command(words: List[str]) -> Optional[Tuple[str, str]]:
    if not words:
        return ("must name the hpclaunch command", "e.g. [hpclaunch] or [/shared/venv/bin/hpclaunch]")
    if len(words) > 16:
        return ("has more than 16 words", "put the command in a script on the cluster and name that")
    for word in words:
        found = _one_line(word)
        if found:
            return (f"word {word!r} {found[0]}", found[1])
    if words[0].startswith("-"):
        return ("starts with an option, not a command", "name the command first, e.g. [hpclaunch]")
    return None


def _runs_root(value: str) -> Optional[Tuple[str, str]]:
    return _one_line(value) or runs_root_problem(value)


def parse_size(text: str) -> int:
    """Bytes in "200M", "2G", "512K" or a plain number of bytes; ValueError otherwise."""
    m = _SIZE.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * _FACTOR[m.group(2)]


def _max_upload(value: str) -> Optional[Tuple[str, str]]:
    try:
        size = parse_size(value)
    except ValueError:
        return ("is not a size", "write a number with K, M or G, e.g. 500M")
    if not 0 < size <= MAX_UPLOAD_LIMIT:
        return ("must be more than 0 and at most 64G", "e.g. 500M")
    return None


@dataclass
class Remote:
    """How to reach this cluster's login node from your own machine (hpclaunch submit --remote)."""

    host: str = field(help="ssh destination of the login node: [user@]host, or a Host from ~/.ssh/config",
                      example="me@login.cluster.org", check=_destination)
    code_root: str = field(help="folder on the cluster's shared filesystem that projects are copied into "
                           "(absolute, or relative to your home there)", example="/shared/me/hpclaunch-code",
                           check=_code_root)
    command: List[str] = field(default_factory=lambda: ["hpclaunch"], check=_command,
                               help="the hpclaunch command on the login node (its words)")
    port: Optional[int] = field(None, minimum=1, maximum=65535, help="ssh port (default: ssh's, usually 22)")
    env: Dict[str, Scalar] = field(default_factory=dict,
                                   help="environment of the remote hpclaunch (e.g. SLURM_CONF, HPCLAUNCH_HOME)")
    ssh_options: Dict[str, Scalar] = field(default_factory=dict,
                                           help="ssh -o options, e.g. {IdentityFile: ~/.ssh/id_cluster}")
    connect_timeout: int = field(15, minimum=1, maximum=300, help="seconds to wait for the login node to answer")
    max_upload: str = field("200M", check=_max_upload,
                            help="the largest project that is copied (K, M, G), counted before compression")
    runs_root: Optional[str] = field(None, check=_runs_root,
                                     help="where run directories go on the cluster (default: the job's "
                                     "runs_root, relative to the copied code directory)")


def entry_problems(remote: Remote, path: str = "remote") -> Iterator[Tuple[str, str, Any, str]]:
    """(field path, message, value, fix) for each bad entry of the remote's env and ssh_options: the
    mappings are checked key by key, so each problem names its key."""
    for section, limit in (("env", MAX_ENV_VALUE), ("ssh_options", MAX_TEXT)):
        entries = getattr(remote, section) or {}
        if len(entries) > MAX_ENTRIES:
            yield (f"{path}.{section}", f"has {len(entries)} entries (at most {MAX_ENTRIES})", len(entries),
                   "keep the ones the login node needs")
            continue
        seen: Dict[str, str] = {}   # ssh reads option names in any case: two spellings would race
        for name, value in entries.items():
            sub = f"{path}.{section}.{name}"
            if section == "ssh_options" and name.lower() in seen:
                yield (sub, f"sets the same ssh option as {seen[name.lower()]} (ssh ignores case)", name,
                       "keep one of them")
                continue
            seen.setdefault(name.lower(), name)
            if section == "env":
                if not _ENV_NAME.fullmatch(name):
                    yield (sub, "is not a valid environment variable name", name,
                           "use letters, digits and _, not starting with a digit")
                    continue
                if looks_secret(name):
                    yield (sub, "looks like a secret; remote env values are sent on the ssh command line", name,
                           "set it in your login environment on the cluster instead (e.g. ~/.bashrc there)")
                    continue
                found = _one_line(str(value), limit)
            else:
                if not _OPTION_NAME.fullmatch(name):
                    yield (sub, "is not an ssh option name", name, "write one option name as the key, e.g. "
                           "IdentityFile, ProxyJump, User (ssh_config(5))")
                    continue
                refused = name_problem(name)
                if refused:
                    yield (sub, refused[0], value, refused[1])
                    continue
                found = _one_line(str(value), limit) or value_problem(name, value)
            if found:
                yield (sub, found[0], value, found[1])
