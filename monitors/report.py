"""``hpclaunch report``: power and thermal reports of a run directory.

Entry points for the CLI:

* ``build_report(run_dir, *, engine="auto", bins=240) -> Report`` — pure, reads files only.
* ``render(report, fmt="text", *, width=120, color=False) -> str | bytes`` — fmt text|json|html.
* ``build_fleet_report(rows) -> FleetReport`` and ``render_fleet(fleet, fmt)`` — see report_fleet.
* ``main_report(argv=None) -> int`` — ``RUN_DIR [--format text|json|html] [-o FILE]``.

The JSON document (schema ``hpclaunch.report/1``) is described in docs/report-schema.md.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from .report_model import REPORT_SCHEMA, Report, build  # noqa: F401 (re-exported)
from .report_fleet import FleetReport, build_fleet_report, render_fleet  # noqa: F401

FORMATS = ("text", "json", "html")


def build_report(run_dir, *, engine: str = "auto", bins: int = 240) -> Report:
    """Read ``run_dir/monitor`` and ``run_dir/metrics`` and compute the report.

    ``engine``: CSV reader, "auto" (pyarrow when installed, else the csv module), "pyarrow", "csv".
    ``bins``: number of time bins of the plotted series."""
    return build(run_dir, engine=engine, bins=bins)


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return _clean(x.item())
    return x


def to_json(report: Report, indent: Optional[int] = 2) -> str:
    return json.dumps(_clean(report.data), indent=indent, allow_nan=False) + "\n"


def render(report: Report, fmt: str = "text", *, width: int = 120, color: bool = False) -> Union[str, bytes]:
    """Render a report: "text" (rich tables + sparklines), "json", "html" (one self-contained file)."""
    if fmt == "json":
        return to_json(report)
    if fmt == "text":
        from .report_text import render_text
        return render_text(report, width=width, color=color)
    if fmt == "html":
        from .report_html import render_html
        return render_html(report)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


def main_report(argv: Optional[Sequence[str]] = None) -> int:
    """``hpclaunch report RUN_DIR [--format text|json|html] [-o FILE]``; returns an exit code."""
    ap = argparse.ArgumentParser(prog="hpclaunch report",
                                 description="Energy, power and thermal report of a run directory")
    ap.add_argument("run_dir", help="run directory (runs/<name>-<jobid>)")
    ap.add_argument("--format", "-f", choices=FORMATS, default=None,
                    help="output format (default: text, or from the -o suffix .json/.html)")
    ap.add_argument("-o", "--output", help="write to FILE instead of stdout")
    ap.add_argument("--engine", choices=("auto", "pyarrow", "csv"), default="auto", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    fmt = a.format
    if fmt is None:
        suf = Path(a.output).suffix.lower() if a.output else ""
        fmt = {".json": "json", ".html": "html", ".htm": "html"}.get(suf, "text")
    rd = Path(a.run_dir)
    if not rd.is_dir():
        print(f"hpclaunch report: {rd}: not a directory", file=sys.stderr)
        return 2
    rep = build_report(rd, engine=a.engine)
    color = a.output is None and sys.stdout.isatty()
    out = render(rep, fmt, color=color, width=_term_width())
    if a.output:
        mode = "wb" if isinstance(out, bytes) else "w"
        with open(a.output, mode) as f:
            f.write(out)
        print(f"report written to {a.output}", file=sys.stderr)
    else:
        sys.stdout.write(out if isinstance(out, str) else out.decode())
    return 0


def _term_width() -> int:
    import shutil
    return max(80, min(160, shutil.get_terminal_size((120, 40)).columns))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_report())
