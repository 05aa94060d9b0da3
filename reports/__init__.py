"""Login-side power and thermal reports of a run directory (``hpclaunch report``), and the fleet view.

Entry points for the CLI:

* ``build_report(run_dir, *, engine="auto", bins=240) -> Report`` — pure, reads files only.
* ``render(report, fmt="text", *, width=120, color=False) -> str | bytes`` — fmt text|json|html.
* ``build_fleet_report(rows) -> FleetReport`` and ``render_fleet(fleet, fmt)`` in ``hpclaunch.reports.fleet``
  (imported from there, not re-exported here: every submission imports this package, for the attempts
  reader (reports/attempts.py), and had no use for the fleet view's ~4 ms).

The JSON document (schema ``hpclaunch.report/1``) is described in docs/report-schema.md.

A job's report needs numpy and the CSV readers; the fleet view needs neither (it reads the
registry's ledger), so the package loads them on a job report's first call, not on import: a
10,000-job ``report --since`` would otherwise spend a tenth of its second loading them.
"""
from __future__ import annotations

import json
from typing import Optional, Union

from hpclaunch.reports.model import REPORT_SCHEMA, Report, clean

__all__ = ["build_report", "render", "to_json", "Report", "REPORT_SCHEMA", "FORMATS"]

FORMATS = ("text", "json", "html")


def build_report(run_dir, *, engine: str = "auto", bins: int = 240, workers: Optional[int] = None) -> Report:
    """Read ``run_dir/monitor`` and ``run_dir/metrics`` and compute the report.

    ``engine``: CSV reader, "auto" (pyarrow when installed, else the csv module), "pyarrow", "csv".
    ``bins``: number of time bins of the plotted series. ``workers``: processes a large job's report
    shares its nodes among (reports/by_node.py; None: one per CPU this process may use)."""
    from hpclaunch.reports.document import build
    return build(run_dir, engine=engine, bins=bins, workers=workers)


def to_json(report: Report, indent: Optional[int] = 2) -> str:
    return json.dumps(clean(report.data), indent=indent, allow_nan=False) + "\n"


def render(report: Report, fmt: str = "text", *, width: Optional[int] = None, color: bool = False,
           full: bool = False) -> Union[str, bytes]:
    """Render a report: "text" (rich tables + sparklines), "json", "html" (one self-contained file).
    Text fits `width` columns: by default the terminal's ($COLUMNS, else 120), at least 60. A large
    job's tables show their most telling rows (reports/views.py); ``full``: every row."""
    if width is None:
        import shutil
        width = max(60, min(200, shutil.get_terminal_size((120, 24)).columns))
    if fmt == "json":
        return to_json(report)
    if fmt == "text":
        from hpclaunch.reports.render_text import render_text
        return render_text(report, width=width, color=color, full=full)
    if fmt == "html":
        from hpclaunch.reports.render_html import render_html
        return render_html(report, full=full)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
