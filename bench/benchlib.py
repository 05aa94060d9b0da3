"""What every bench script shares: the context of a run, medians with their spread, and the markdown
section it writes for docs/benchmarks.md.

Each bench script takes ``--markdown PATH`` and writes one section there (``docs/bench/<name>.md`` by
convention) through :class:`Section`; ``make bench`` runs them all and assembles docs/benchmarks.md
from the sections, so no figure in it is typed by hand. Import it from a script in ``bench/<name>/``
with ``sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))``.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Iterable, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = os.environ.get("HPCLAUNCH_BENCH_VENVS") or os.path.expanduser("~/.cache/hpclaunch/bench-venvs")


def commit() -> str:
    """The repository's short commit, with ``+dirty`` when the work tree differs from it. The benches'
    own output (docs/bench/, docs/benchmarks.md) does not count: `make bench` writes one section
    after another, and every section after the first would otherwise say +dirty."""
    def git(*args):
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)docs/bench", ":(exclude)docs/benchmarks.md")
    return head + ("+dirty" if changed else "")


def install_kind(python: str = sys.executable) -> str:
    """How hpclaunch is installed for ``python``: "wheel", "editable", or "not installed"."""
    code = ("import importlib.metadata as m, json\n"
            "try:\n d = m.distribution('hpclaunch')\nexcept m.PackageNotFoundError:\n print('not installed')\n"
            "else:\n u = d.read_text('direct_url.json')\n"
            " e = bool(u and json.loads(u).get('dir_info', {}).get('editable'))\n"
            " print('editable' if e else 'wheel')\n")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def last_line(p: subprocess.CompletedProcess) -> str:
    """The last line a failed command printed: the one that says why."""
    lines = (p.stderr or p.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {p.returncode}"


def build_wheel(ref: Optional[str], out: str) -> Tuple[Optional[str], str]:
    """(path of the wheel, or None; why not): hpclaunch's wheel built into ``out`` from commit ``ref``
    or, when None, from the working tree as it is now (tracked and untracked files git does not
    ignore, as a clean clone plus the changes not yet committed). Always from a fresh copy: setuptools
    never empties an in-tree build/, so a module deleted since would still be in the wheel. Built by
    this interpreter's setuptools (no build isolation: nothing to download)."""
    src = os.path.join(out, "src")
    os.makedirs(src)
    if ref is None:
        files = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, check=True).stdout
        tar = subprocess.run(["tar", "-c", "-C", REPO, "--null", "--ignore-failed-read", "-T", "-"], input=files,
                             capture_output=True)  # --ignore-failed-read: a file deleted but not yet committed
    else:
        tar = subprocess.run(["git", "-C", REPO, "archive", ref], capture_output=True)
    x = subprocess.run(["tar", "-x", "-C", src], input=tar.stdout, capture_output=True)
    if tar.returncode != 0 or x.returncode != 0:
        return None, f"cannot copy the sources: {(tar.stderr or x.stderr).decode()[-300:]}"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", out, src], capture_output=True, text=True)
    wheels = glob.glob(os.path.join(out, "hpclaunch-*.whl"))
    if p.returncode != 0 or not wheels:
        return None, f"cannot build its wheel: {last_line(p)}"
    return wheels[0], ""


def wheel_site(ref: Optional[str] = None, build: bool = True) -> Tuple[Optional[str], str]:
    """(directory to put first on PYTHONPATH, note): hpclaunch's wheel (build_wheel) installed there
    with ``pip install --target`` (byte-compiled, as pip installs for users), from commit ``ref`` or,
    when None, from the working tree. A commit's directory is kept (made when missing if ``build``);
    the working tree's is rebuilt at every call, so no bench times stale code."""
    if ref is None:
        site, src_note = os.path.join(VENVS, "tree-site"), "this working tree"
    else:
        p = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", "--quiet", ref + "^{commit}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return None, f"{ref!r}: no such commit in {REPO}: skipped"
        name, ref = ref, p.stdout.strip()
        site = os.path.join(VENVS, "baselines", ref[:12])
        src_note = ref[:10] if ref.startswith(name) else f"{name} ({ref[:10]})"
        if os.path.isfile(os.path.join(site, "hpclaunch", "monitors", "daemon.py")):
            return site, f"{src_note}: its wheel installed in {site}"
        if not build:
            return None, f"{src_note}: {site} is missing: skipped"
    with tempfile.TemporaryDirectory() as tmp:
        wheel, why = build_wheel(ref, tmp)
        if wheel is None:
            return None, f"{src_note}: {why}"
        part = site + ".part"  # complete or absent: a kept commit's check looks for the finished tree
        shutil.rmtree(part, ignore_errors=True)
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", part, wheel],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return None, f"{src_note}: cannot install its wheel: {last_line(p)}"
        shutil.rmtree(site, ignore_errors=True)
        os.replace(part, site)
    return site, f"{src_note}: its wheel installed in {site}"


def run_from_wheel() -> None:
    """Re-run this bench script with hpclaunch from this working tree's wheel when it would import it
    from an editable install (whose import hook a user's wheel install does not pay): the wheel's
    directory goes first on PYTHONPATH, for the script and every process it starts (ranks, daemons,
    CLIs). PYTHONSAFEPATH keeps ``python -m`` from putting the current directory (the repository's
    own ``hpclaunch/`` folder, if run from there) ahead of it. ``$HPCLAUNCH_BENCH_EDITABLE=1``
    keeps the editable install. Every section says which install ran (``context``)."""
    site = os.environ.get("HPCLAUNCH_BENCH_SITE")
    if site:  # the re-run: hpclaunch must come from the wheel's directory, not the work tree
        import importlib.util
        origin = getattr(importlib.util.find_spec("hpclaunch"), "origin", None) or ""
        if not origin.startswith(site + os.sep):
            raise SystemExit(f"bench: hpclaunch is imported from {origin or 'nowhere'}, not from {site}")
        return
    if os.environ.get("HPCLAUNCH_BENCH_EDITABLE") == "1":
        return
    if install_kind() != "editable":
        return
    print("building this tree's hpclaunch wheel for the bench (HPCLAUNCH_BENCH_EDITABLE=1 skips it) ...",
          file=sys.stderr, flush=True)
    site, note = wheel_site()
    if site is None:
        raise SystemExit(f"bench: {note}; rerun with HPCLAUNCH_BENCH_EDITABLE=1 to time the editable install")
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, HPCLAUNCH_BENCH_SITE=site, PYTHONSAFEPATH="1",
               PYTHONPATH=site + (os.pathsep + path if path else ""))
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


# Written beside a bench venv's python by whoever installs a wheel there (bench_startup.install): the
# commit the wheel was built from, which a later bench run on that venv may no longer be at.
WHEEL_SOURCE = "hpclaunch-wheel-source.txt"


def wheel_source(python: str) -> Optional[str]:
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(python)), WHEEL_SOURCE)) as f:
            return f.read().strip() or None
    except OSError:
        return None


def context(python: str = sys.executable) -> dict:
    here, install = commit(), install_kind(python)
    built = wheel_source(python) if install == "wheel" else None
    if built and built != here:  # `run_all --only submit` on the wheel an earlier startup run built
        install = f"wheel built at {built}"
    return {"commit": here, "date": datetime.date.today().isoformat(),
            "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "install": install}


def timeit(cmd, cwd, env) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one run; a failed run stops the bench."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-800:]}")
    return dt, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def spread(values: Sequence[float]) -> dict:
    """Median, min, max and count of ``values``."""
    xs = sorted(values)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)}


def fmt(values: Sequence[float], unit: str = "s", digits: int = 3) -> str:
    """``1.23 s [1.10–1.40, n=7]``: the median, then the range."""
    s = spread(values)
    return f"{s['median']:.{digits}f} {unit} [{s['min']:.{digits}f}–{s['max']:.{digits}f}, n={s['n']}]"


def ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of ``a`` over median of ``b``."""
    return statistics.median(a) / statistics.median(b)


class Section:
    """One bench's section of docs/benchmarks.md: a title, the command that made it, the context of
    the run, then paragraphs and tables in the order added."""

    def __init__(self, title: str, command: str, python: str = sys.executable):
        self.title = title
        self.command = command
        self.ctx = context(python)
        self.parts: List[str] = []

    def para(self, text: str) -> "Section":
        self.parts.append(text.strip())
        return self

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]],
              align: Optional[str] = None) -> "Section":
        """``align``: one character per column, "l" or "r" (default: first left, the rest right)."""
        align = align or "l" + "r" * (len(header) - 1)
        lines = ["| " + " | ".join(map(str, header)) + " |",
                 "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        self.parts.append("\n".join(lines))
        return self

    def text(self) -> str:
        c = self.ctx
        head = (f"## {self.title}\n\n```\n{self.command}\n```\n\n"
                f"Run of {c['date']} at commit {c['commit']}, hpclaunch install: {c['install']}, "
                f"Python {c['python']}, {c['cpus']} CPUs ({c['machine']}), load average "
                f"{' / '.join(map(str, c['load_average']))} at the start.")
        return head + "\n\n" + "\n\n".join(self.parts) + "\n"

    def write(self, path: Optional[str]) -> None:
        """Write the section to ``path`` (atomically) and its context beside it as JSON; print it."""
        text = self.text()
        print(text)
        if not path:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        for target, data in ((path, text), (os.path.splitext(path)[0] + ".json", json.dumps(self.ctx, indent=1))):
            tmp = target + ".tmp"
            with open(tmp, "w") as f:
                f.write(data)
            os.replace(tmp, target)
