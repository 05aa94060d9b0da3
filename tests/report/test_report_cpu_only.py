"""Reports that help for every job (issue 14, item 7): a CPU-only program that never heard of
hpclaunch, run for real on the local backend with the monitor on. Its report shows host CPU,
memory and load, its ranks from the script's rank record, durations in fitting units, the actual
cause of missing RAPL, no Python reprs, and text that fits an 80-column terminal."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_report_render import CHROMIUM, _chromium, _console_errors  # noqa: E402

from hlcli import hl  # noqa: E402

REPRS = re.compile(r"\{\}|\[\]|\bNone\b|\{'|\bnan\b|\bTrue\b|\bFalse\b")


@pytest.fixture(scope="module")
def cpu_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cpuonly")
    env = dict(os.environ, HPCLAUNCH_HOME=str(tmp / "home"))
    (tmp / "job.yaml").write_text("name: cpu only\nlauncher: srun\nresources: {nodes: 1, tasks_per_node: 2}\n"
                                  "monitor: {interval: 0.25}\ncommand: [python, -c, "
                                  "\"import time; t = time.time()\\nwhile time.time() - t < 3: sum(range(10**5))\"]\n")
    sub = json.loads(hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp), env=env).stdout)
    return sub["run_dir"], env


def test_text_report_has_host_figures_ranks_and_fits_80_columns(cpu_job):
    run_dir, env = cpu_job
    text = hl("report", run_dir, env=dict(env, COLUMNS="80")).stdout
    assert max(len(line) for line in text.splitlines()) <= 80, text
    flat = " ".join(text.split())  # the terminal's wrapping undone
    assert re.search(r"duration \d\.\d s ", flat) and "2 rank(s)" in flat, text
    row = next(line for line in text.splitlines() if line.strip().startswith(os.uname().nodename[:4]))
    cpu, mem, load = re.search(r"(\d+)/(\d+)\s+([\d.]+)/([\d.]+)\s+([\d.]+)/([\d.]+)", row).group(1, 3, 5)
    assert 0 < int(cpu) <= 100 and float(mem) > 0 and float(load) >= 0, row
    assert "GPUs (hottest first)" not in text and "Idle" not in text and "GPU avg" not in text
    if not os.path.exists("/sys/class/powercap"):
        assert "CPU energy unknown: /sys/class/powercap does not exist" in flat
        assert "without privileges" not in text
    assert not REPRS.search(text), REPRS.search(text)


def test_json_report_carries_host_cpu_memory_load_and_ranks(cpu_job):
    run_dir, env = cpu_job
    d = json.loads(hl("report", run_dir, "--format", "json", env=env).stdout)
    node = d["nodes"][0]
    assert 0 < node["avg_cpu_pct"] <= node["max_cpu_pct"] <= 100
    assert 0 < node["mem_used_mib"]["max"] <= node["mem_used_mib"]["total"]
    assert node["load1"]["max"] >= node["load1"]["avg"] >= 0
    assert [(r["rank"], r["host"]) for r in d["ranks"]] == [(0, os.uname().nodename), (1, os.uname().nodename)]
    assert d["energy_j"]["total"] is None      # unknown stays null, never 0


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                    reason="chromium not installed (make deps installs it; in CI this test must run)")
def test_html_in_headless_chromium_has_host_figures_and_no_python_reprs(cpu_job, tmp_path):
    run_dir, env = cpu_job
    page = tmp_path / "cpu.html"
    hl("report", run_dir, "--format", "html", "-o", str(page), env=env)
    p, console = _chromium(page)
    assert p.returncode == 0 and not _console_errors(console), console
    visible = re.sub(r"<script.*?</script>|<style.*?</style>|<[^>]+>", " ", p.stdout, flags=re.S)
    assert "CPU % avg / max" in visible and "memory used GiB max / total" in visible
    assert re.search(r"Duration\s+\d\.\d s", visible), visible[:400]
    assert "energy sources: none; counter vs integrated power n/a" in visible
    assert not REPRS.search(visible), REPRS.search(visible).group(0) + " in " + visible[
        max(0, REPRS.search(visible).start() - 80):REPRS.search(visible).start() + 80]
