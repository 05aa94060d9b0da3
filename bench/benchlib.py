"""What every bench script shares: the context of a run, medians with their spread, and the markdown
section it writes for docs/benchmarks.md.

Each bench script takes ``--markdown PATH`` and writes one section there (``docs/bench/<name>.md`` by
convention) through :class:`Section`; ``make bench`` runs them all and assembles docs/benchmarks.md
from the sections, so no figure in it is typed by hand. Import it from a script in ``bench/<name>/``
with ``sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from typing import Iterable, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit() -> str:
    """The repository's short commit, with ``+dirty`` when the work tree differs from it."""
    def git(*args):
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def install_kind(python: str = sys.executable) -> str:
    """How hpclaunch is installed for ``python``: "wheel", "editable", or "not installed"."""
    code = ("import importlib.metadata as m, json\n"
            "try:\n d = m.distribution('hpclaunch')\nexcept m.PackageNotFoundError:\n print('not installed')\n"
            "else:\n u = d.read_text('direct_url.json')\n"
            " e = bool(u and json.loads(u).get('dir_info', {}).get('editable'))\n"
            " print('editable' if e else 'wheel')\n")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def context(python: str = sys.executable) -> dict:
    return {"commit": commit(), "date": datetime.date.today().isoformat(),
            "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "install": install_kind(python)}


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
