"""A large job's text and HTML views (reports/views.py, issue 50): the hottest GPUs and nodes, the nodes'
spread, a node grid instead of a node x GPU heat map, and every row only with --full."""
import re
import subprocess
import sys

import pytest

from hpclaunch.reports import build_report, render, views
from synth import GpuSpec, HostSpec, write_run

NODES, GPUS = 40, 2


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    run = tmp_path_factory.mktemp("big") / "job-50"
    hot = ("n17", 1)
    specs = [GpuSpec(f"n{h:02d}", i, a=200 + h, ranks=str(GPUS * h + i),
                     hot_window=(0, 61) if (f"n{h:02d}", i) == (hot[0], hot[1]) else None)
             for h in range(NODES) for i in range(GPUS)]
    write_run(run, specs, hosts=[HostSpec(f"n{h:02d}") for h in range(NODES)], duration=60.0,
              metrics=dict(ranks=NODES * GPUS, steps=10, slow_rank=33))
    return run, build_report(run)


def _html_rows(page: str, heading: str) -> int:
    """Rows of the table after the <h2> that starts with ``heading``."""
    part = page.split(f"<h2>{heading}", 1)[1].split("</table>", 1)[0]
    return part.count("<tr>") - 1   # less the header's


def test_text_shows_the_hottest_and_the_spread_not_every_row(big):
    run, rep = big
    txt = render(rep, "text", width=160)
    assert f"All {NODES} nodes: min / median / max" in txt
    node_lines = [ln for ln in txt.split("Nodes (hottest first)")[1].splitlines() if re.match(r"\s*n\d\d ", ln)]
    assert node_lines[0].split()[0] == "n17" and len(node_lines) == views.TOP   # the hottest node first
    assert f"... {NODES - views.TOP} more nodes: hpclaunch report --full" in txt
    assert f"... {NODES * GPUS - views.TOP} more GPUs: hpclaunch report --full" in txt
    gpu_lines = [ln for ln in txt.splitlines() if re.match(r"\s*n\d\d/\d ", ln)]
    assert len(gpu_lines) == views.TOP and gpu_lines[0].split()[0] == "n17/1"   # the hottest first
    full = render(rep, "text", width=160, full=True)
    assert "more GPUs" not in full and len([ln for ln in full.splitlines() if re.match(r"\s*n\d\d/\d ", ln)]) == NODES * GPUS


def test_html_shows_a_node_grid_and_the_top_rows(big):
    run, rep = big
    page = render(rep, "html")
    assert "Nodes at a glance" in page and "Node × GPU" not in page
    assert page.count("<title>n") >= 2 * NODES   # one square per node, in each of the two grids
    assert _html_rows(page, "GPUs") == views.TOP and _html_rows(page, "Nodes (hottest") == views.TOP
    assert _html_rows(page, f"All {NODES} nodes") == len(views.node_spread(rep.data["nodes"]))
    assert _html_rows(page, "Ranks") == views.TOP
    assert f"{NODES * GPUS - views.TOP} more GPUs" in page
    full = render(rep, "html", full=True)
    assert "Node × GPU" in full and _html_rows(full, "GPUs") == NODES * GPUS and _html_rows(full, "Nodes") == NODES
    assert len(page) < len(full)


def test_small_jobs_show_every_row_in_host_order(tmp_path):
    write_run(tmp_path, [GpuSpec(f"n{h}", i) for h in range(3) for i in range(2)],
              hosts=[HostSpec(f"n{h}") for h in range(3)], duration=60.0)
    rep = build_report(tmp_path)
    page, txt = render(rep, "html"), render(rep, "text", width=160)
    assert "Node × GPU" in page and "more GPUs" not in page and "min / median / max" not in page + txt
    assert _html_rows(page, "GPUs") == 6 and _html_rows(page, "Nodes") == 3


def test_report_full_flag(big):
    run, _ = big
    out = subprocess.run([sys.executable, "-m", "hpclaunch", "report", str(run), "--full", "-f", "text"],
                         capture_output=True, text=True, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "more GPUs" not in out.stdout and "n39/1" in out.stdout
    short = subprocess.run([sys.executable, "-m", "hpclaunch", "report", str(run), "-f", "text"],
                           capture_output=True, text=True, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    assert "more GPUs: hpclaunch report --full" in short.stdout


def test_memory_per_rank_shows_the_largest_holders(big):
    import copy
    run, rep = big
    rep = copy.deepcopy(rep)
    for r in rep.data["ranks"]:   # rank 33 holds the most
        r["memory"] = {"state_mib": 100.0 + (500 if r["rank"] == 33 else r["rank"] % 7), "peak_rss_mib": 900.0}
    shown, left = views.memory_ranks(rep.data["ranks"])
    assert shown[0]["rank"] == 33 and len(shown) == views.TOP and left == NODES * GPUS - views.TOP
    txt, page = render(rep, "text", width=160), render(rep, "html")
    assert f"... {NODES * GPUS - views.TOP} more ranks with memory records: hpclaunch report --full" in txt
    assert page.split("<h3>Memory per rank</h3>", 1)[1].split("</table>", 1)[0].count("<tr>") - 1 == views.TOP
    assert len(views.memory_ranks(rep.data["ranks"], full=True)[0]) == NODES * GPUS
