"""Jobs on a cluster reached over ssh: `submit --remote` ships the project and submits it there; the
registry rows it leaves here (backend "remote") are followed through the same kind of connection.

The remote side is the remote hpclaunch itself, asked with `--json` where an answer is parsed: it
keeps its own registry (the job's row with its Slurm id), this machine's registry keeps a row that
names the remote (its profile's name as the cluster, and the settings used, so `status` works from
any folder) and the remote job. Jobs are named to the remote hpclaunch by their run directory,
which no other job of its registry shares.

The code goes to `<code_root>/<folder>-<content address>`: unpacked into a temporary folder,
marked complete, then renamed into place (atomic), so a code directory either is complete or does
not exist, and one that exists is never copied again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from hpclaunch.common.errors import HpclaunchError, InvalidInput
from hpclaunch.launchers.backends.choice import REMOTE
from hpclaunch.runs.registry import JobRecord, Registry
from hpclaunch.runs.remote_pack import Package, collect, human, project_root, write_tar
from hpclaunch.runs.remote_ssh import RemoteError, SshSession
from hpclaunch.spec.overrides import parse_override
from hpclaunch.spec.profiles import load_profile
from hpclaunch.spec.remote import Remote, entry_problems, parse_size
from hpclaunch.spec.typedload import Loader, SourceMap, to_plain
from hpclaunch.spec.yamlio import display_path, load_yaml_file

BACKEND = REMOTE  # the backend table's name for these rows (launchers/backends/choice.py)
MARKER = ".hpclaunch-code"


class Target(NamedTuple):
    """A remote: its settings, the profile's name (the registry's cluster) and the file it came from."""
    remote: Remote
    name: str
    source: str


def target_for_submit(job_path: str, ref: Optional[str], overrides: Sequence[str] = ()) -> Target:
    """The remote named by `--remote NAME` (a profile with a remote: section), or, with no NAME, the
    job's profile's."""
    if not ref:
        data = load_yaml_file(job_path, "job file")
        ref = data.get("profile", "local") if isinstance(data, dict) else "local"
        for key, value in (parse_override(o) for o in overrides):
            if key == "profile":
                ref = value
        if not isinstance(ref, str):
            ref = "local"
        lp = load_profile(ref, os.path.dirname(os.path.abspath(job_path)), where=(display_path(job_path), "profile"))
        how = f"--remote NAME, or a remote: section in the job's profile {lp.profile.name!r}"
    else:
        lp = load_profile(ref)
        how = "--remote NAME: name a profile that has a remote: section"
    source = display_path(lp.path)
    if lp.profile.remote is None:
        raise HpclaunchError(f"{source}: profile {lp.profile.name!r} has no remote: section \u2014 add one (host, "
                             f"code_root; docs/remote.md), or use {how}")
    return Target(lp.profile.remote, lp.profile.name, source)


def target_of(record: JobRecord) -> Target:
    """The remote a registry row was submitted to, from the settings kept in the row (checked again:
    the registry is a file anyone may edit)."""
    where = f"registry: job {record.job_id}"
    try:
        doc = json.loads(record.resolved or "{}")["remote"]
        settings, name, source = doc["settings"], doc["name"], doc["source"]
    except (ValueError, KeyError, TypeError):
        raise HpclaunchError(f"{where}: the row holds no remote settings \u2014 it was not made by submit "
                             "--remote, or the registry was edited; submit the job again") from None
    loader = Loader(SourceMap(where))
    remote = loader.load(Remote, settings, "remote")
    if remote is not None:
        for found in entry_problems(remote):
            loader.problem(*found)
    if loader.problems:
        raise InvalidInput(loader.problems)
    return Target(remote, str(name), str(source))


class Sessions:
    """The ssh sessions of one command: one per remote, however many calls it makes."""

    def __init__(self) -> None:
        self._open: Dict[str, SshSession] = {}

    def get(self, target: Target) -> SshSession:
        key = json.dumps([target.name, to_plain(target.remote)], sort_keys=True)
        if key not in self._open:
            self._open[key] = SshSession(target.remote, target.name, target.source)
        return self._open[key]


# --- submit ---------------------------------------------------------------------------------------

def package_for(job_path: str, cwd: str, target: Target) -> tuple[Package, str, str]:
    """(the package, the submit folder and the job file, both relative to the package root)."""
    root, git = project_root(cwd)
    job_abs = os.path.abspath(job_path)
    job_rel = os.path.relpath(job_abs, root)
    if job_rel.startswith(".."):
        raise HpclaunchError(f"{display_path(job_path)}: the job file is outside the folder that is copied "
                             f"({root}) \u2014 move it into the project, or submit from the folder that holds it")
    data = load_yaml_file(job_path, "job file")
    runs = data.get("runs_root") if isinstance(data, dict) else None
    runs = runs if isinstance(runs, str) and not os.path.isabs(runs) else "runs"
    excluded = [os.path.relpath(os.path.join(cwd, runs), root)]
    pkg = collect(root, git, excluded, parse_size(target.remote.max_upload), target.source)
    if not any(e.path == job_rel for e in pkg.entries):
        raise HpclaunchError(f"{display_path(job_path)}: the job file is not among the files copied (git ignores it,"
                             " or it is in the runs folder) \u2014 `git add` it or take it out of .gitignore")
    return pkg, os.path.relpath(cwd, root), job_rel


def ship(session: SshSession, pkg: Package, say: Callable[[str], None]) -> str:
    """The package's code directory on the cluster, copied there unless it is already complete."""
    root = session.remote.code_root
    final = f"{root.rstrip('/')}/{pkg.slug}"
    q = shlex.quote
    marker = f"{pkg.digest} {len(pkg.entries)}"
    code, out, err = session.call(f"if [ -f {q(final + '/' + MARKER)} ]; then echo present; else echo absent; fi")
    if code == 0 and out.strip() == "present":
        say(f"code: unchanged, nothing copied: {session.destination}:{final}")
        return final
    if code != 0:
        raise _remote_failed(session, "cannot look for the code directory", code, err)
    # Unpack beside the final place, mark complete, rename into place: the final name only ever
    # names a complete copy. Losing a race to an identical upload is fine; a folder there without
    # the marker is an incomplete leftover (not ours to keep) and is replaced.
    body = (f"set -e; umask 077; mkdir -p {q(root)}; t=$(mktemp -d {q(root.rstrip('/') + '/.incoming-' + pkg.slug)}.XXXXXX); "
            "trap 'rm -rf \"$t\"' EXIT; tar -xzf - -C \"$t\"; "
            f"printf '%s\\n' {q(marker)} > \"$t\"/{MARKER}; "
            f"if mv -T \"$t\" {q(final)} 2>/dev/null; then trap - EXIT; echo shipped; "
            f"elif [ -f {q(final + '/' + MARKER)} ]; then echo present; "
            f"else rm -rf {q(final)}.stale.$$; mv -T {q(final)} {q(final)}.stale.$$; rm -rf {q(final)}.stale.$$; "
            f"mv -T \"$t\" {q(final)}; trap - EXIT; echo shipped; fi")
    sent = [0]

    def feed(stdin) -> None:
        sent[0] = write_tar(pkg, stdin)

    code, out, err = session.call(body, feed=feed)
    if code != 0 or out.strip() not in ("shipped", "present"):
        raise _remote_failed(session, f"cannot write the code directory {final}", code, err)
    say(f"code: copied {len(pkg.entries)} files ({human(pkg.size)}, {human(sent[0])} sent) to "
        f"{session.destination}:{final}")
    return final


MAX_WORD = 4096
MAX_WORDS = 64 << 10


def check_words(words: Sequence[str]) -> None:
    """Command-line values that go to the remote shell (quoted): one printable line each, bounded,
    so a value can neither break the remote command apart nor exceed what a login shell takes."""
    for word in words:
        if len(word) > MAX_WORD or not word.isprintable():
            shown = word[:60] + ("..." if len(word) > 60 else "")
            raise HpclaunchError(f"command line: {shown!r}: a value sent to the remote hpclaunch must be one line "
                                 f"of printable text, at most {MAX_WORD} characters — shorten it or put it in "
                                 "the job file")
    if sum(len(w) + 1 for w in words) > MAX_WORDS:
        raise HpclaunchError(f"command line: more than {MAX_WORDS} characters for the remote hpclaunch — "
                             "put the values in the job file")


def _remote_failed(session: SshSession, what: str, code: int, err: str) -> HpclaunchError:
    last = [ln.strip() for ln in err.splitlines() if ln.strip()]
    why = last[-1][:300] if last else f"exit {code}"
    return HpclaunchError(f"{session.source}: remote {session.name} ({session.destination}): {what} ({why}) \u2014 "
                          "check remote.code_root in the profile (a folder you can write on the cluster's shared "
                          "filesystem) and the space there")


def relay_failure(session: SshSession, code: int, err: str) -> HpclaunchError:
    """The remote hpclaunch's own error lines (one per problem), marked with where they come from;
    the command exits with the remote's exit code."""
    lines = [ln for ln in err.splitlines() if ln.strip()] or [f"exit {code}"]
    error = HpclaunchError("\n".join(f"remote {session.name} ({session.destination}): {ln}" for ln in lines))
    error.exit_code = code
    return error


def submit_remote(job_path: str, overrides: Sequence[str], target: Target, *, backend: Optional[str] = None,
                  after: Sequence[str] = (), preflight: bool = True, test_only: bool = False,
                  cwd: Optional[str] = None, registry: Optional[Registry] = None,
                  say: Callable[[str], None] = print, sessions: Optional[Sessions] = None) -> tuple[Optional[JobRecord], dict]:
    """Ship the project and run `hpclaunch submit` in its code directory on the cluster; record the
    job here. Returns (the local registry row, the remote's answer); with test_only, no row."""
    cwd = os.path.abspath(cwd or os.getcwd())
    reg = registry or Registry()
    reg.check()
    pkg, sub_dir, job_rel = package_for(job_path, cwd, target)
    args = ["submit", os.path.relpath(job_rel, sub_dir), "--backend", backend or "slurm"]
    if target.remote.runs_root:
        args += ["-o", f"runs_root={target.remote.runs_root}"]
    for o in overrides:
        args += ["-o", o]
    for a in after:
        args += ["--after", a]
    if not preflight:
        args.append("--no-preflight")
    args += ["--test-only", "--json"] if test_only else ["--json"]
    check_words(args)   # before anything is copied
    session = (sessions or Sessions()).get(target)
    session.check_hpclaunch()
    code_dir = ship(session, pkg, say)
    remote_cwd = code_dir if sub_dir == "." else f"{code_dir}/{sub_dir}"
    code, out, err = session.hpclaunch(*args, cwd=remote_cwd)
    if code != 0:
        raise relay_failure(session, code, err)
    for line in err.splitlines():  # the remote's warnings
        if line.strip():
            say(f"remote {target.name}: {line}")
    try:
        answer = json.loads(out[out.index("{"): out.rindex("}") + 1])
        if not test_only and not all(isinstance(answer.get(k), (str, int)) for k in ("job_id", "name", "run_dir")):
            raise ValueError(out)
    except (ValueError, AttributeError):
        raise HpclaunchError(f"remote {target.name} ({session.destination}): the remote hpclaunch answered no job "
                             f"({out.strip()[:200]!r}) \u2014 run it there by hand: cd {remote_cwd} && "
                             f"{session.hpclaunch_words(*args)}") from None
    if test_only:
        return None, answer
    with open(job_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    snapshot = {"remote": {"name": target.name, "source": target.source, "settings": to_plain(target.remote),
                           "host": session.destination, "code_dir": code_dir, "submit_dir": remote_cwd,
                           "backend": answer.get("backend"), "cluster": answer.get("cluster")}}
    try:
        rec = reg.add(backend=BACKEND, cluster=target.name, job_id=str(answer["job_id"]), name=str(answer["name"]),
                      run_dir=str(answer["run_dir"]), job_file=os.path.abspath(job_path), job_sha256=sha,
                      resolved=snapshot)
    except HpclaunchError as e:  # the job runs: say where, so it is not lost with the local row
        raise HpclaunchError(f"{str(e).splitlines()[0]} \u2014 note: the job IS queued on remote {target.name} as "
                             f"job {answer['job_id']} ({answer['run_dir']}); follow it there with hpclaunch status "
                             f"{answer['job_id']}") from None
    return rec, answer


# --- following ------------------------------------------------------------------------------------

def statuses(records: List[JobRecord], reg: Registry, sessions: Sessions) -> Dict[int, dict]:
    """The remote `status --json` rows of remote jobs, by registry key, one session per remote:
    the remote's active and recent jobs in one call, then any others one by one. Each answer is
    recorded in this registry."""
    out: Dict[int, dict] = {}
    groups: Dict[str, List[JobRecord]] = {}
    for rec in records:
        groups.setdefault(rec.cluster + "\0" + (rec.resolved or ""), []).append(rec)
    for recs in groups.values():
        target = target_of(recs[0])
        session = sessions.get(target)
        by_dir: Dict[str, dict] = {}
        if len(recs) > 1:
            code, text, err = session.hpclaunch("status", "--json")
            if code != 0:
                raise relay_failure(session, code, err)
            by_dir = {row.get("run_dir"): row for row in _json(text, session) if isinstance(row, dict)}
        for rec in recs:
            row = by_dir.get(rec.run_dir)
            if row is None:
                check_words([rec.run_dir])
                code, text, err = session.hpclaunch("status", rec.run_dir, "--json")
                if code != 0:
                    raise relay_failure(session, code, err)
                row = _json(text, session)
            row = dict(row, job_id=rec.job_id, backend=BACKEND, remote=target.name)
            if row.get("state") not in (None, "", "UNKNOWN"):
                reg.update_state(rec.key, row["state"], exit_code=row.get("exit_code"), attempts=row.get("attempts"))
            out[rec.key] = row
    return out


def _json(text: str, session: SshSession):
    try:
        return json.loads(text)
    except ValueError:
        raise HpclaunchError(f"remote {session.name} ({session.destination}): the remote hpclaunch answered "
                             f"no JSON ({text.strip()[:200]!r}) \u2014 check that it runs there by hand") from None


def run_on(rec: JobRecord, command: str, flags: Sequence[str], sessions: Sessions,
           out: Optional[Callable[[str], None]] = None,
           err: Optional[Callable[[str], None]] = None) -> tuple[int, str, str]:
    """The remote `hpclaunch COMMAND RUN_DIR FLAGS` for a remote job: (exit code, stdout, stderr),
    or its output passed to `out`/`err` as it comes (logs --follow)."""
    session = sessions.get(target_of(rec))
    check_words([rec.run_dir, *flags])
    return session.hpclaunch(command, rec.run_dir, *flags, out=out, err=err)


__all__ = ["BACKEND", "RemoteError", "Sessions", "Target", "run_on", "statuses", "submit_remote",
           "target_for_submit", "target_of", "relay_failure"]
