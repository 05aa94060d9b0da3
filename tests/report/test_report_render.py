"""Rendering: JSON schema, text, HTML in headless Chromium, fleet view, a property test."""
import html as htmllib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.reports import build_report, render  # noqa: E402
from hpclaunch.reports.fleet import build_fleet_report, render_fleet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def cluster(tmp, hot=None, hosts=("n1", "n2", "n3"), ngpu=4, duration=900, metrics=True, **kw):
    specs = []
    for h in hosts:
        for i in range(ngpu):
            specs.append(GpuSpec(h, i, a=220 + 10 * i, b=90, phase=0.5 * len(specs), ranks=str(len(specs)),
                                 hot_window=(0, duration + 1) if (h, i) == hot else None,
                                 throttle_window=(200, 260) if i == 1 else None,
                                 idle_window=(0, 60), **kw))
    return write_run(tmp, specs, hosts=[HostSpec(h) for h in hosts], duration=duration, jitter=0.2,
                     metrics=dict(ranks=len(specs), steps=120, slow_rank=5) if metrics else None)


def test_json_schema_document(tmp_path):
    cluster(tmp_path)
    doc = json.loads(render(build_report(tmp_path), "json"))
    assert doc["schema"] == "hpclaunch.report/1"
    for k in ("job", "duration_s", "energy_j", "energy_kwh", "power_w", "idle", "efficiency", "nodes", "gpus",
              "ranks", "stragglers", "coverage", "monitor_overhead", "warnings", "throttle_total_s"):
        assert k in doc, k
    assert set(doc["energy_j"]) >= {"total", "gpu", "cpu"}
    g = doc["gpus"][0]
    for k in ("host", "index", "uuid", "ranks", "energy_j", "energy_source", "avg_power_w", "max_power_w",
              "max_temp_c", "time_near_slowdown_s", "throttle_s", "max_mem_used_mib", "avg_util_pct",
              "crosscheck_pct", "coverage", "power_headroom_w", "idle_energy_j", "max_mem_temp_c"):
        assert k in g, k
    assert len(doc["gpus"]) == 12 and len(doc["nodes"]) == 3 and len(doc["ranks"]) == 12
    # documented in docs/report-schema.md
    schema_doc = (ROOT / "docs" / "report-schema.md").read_text()
    for k in list(doc) + list(g):
        assert f"`{k}`" in schema_doc, f"{k} not documented"


def test_text_report(tmp_path):
    cluster(tmp_path)
    txt = render(build_report(tmp_path), "text", width=140)
    assert "GPUs (hottest first)" in txt and "Stragglers" in txt
    assert any(ch in txt for ch in "▁▂▃▄▅▆▇█")
    assert "\x1b[" not in txt  # no colour codes when not asked


def _throttle_run(tmp_path):
    specs = [GpuSpec("n1", 0, throttle_window=(600, 900), reason_counters=True, hidden_hw_thermal=(1000, 1400, 0.25),
                     idle_window=(0, 60), ranks="0"),
             GpuSpec("n1", 1, throttle_window=(600, 900), ranks="1"),   # no per-reason counters: the bitmask
             GpuSpec("n1", 2, idle_window=(0, 60), ranks="2"),          # idle is no slowdown
             GpuSpec("n1", 3, ranks="3")]
    write_run(tmp_path, specs, hosts=[HostSpec("n1")], duration=1800)
    rep = build_report(tmp_path)
    by = {g["index"]: g for g in rep.data["gpus"]}
    assert by[0]["throttle_s"]["sw_power_cap"] == pytest.approx(300.0) and by[0]["throttle_s"]["gpu_idle"] > 0
    # The views must show the JSON's figures, not figures of their own: change some and look for them.
    by[0]["throttle_s"]["hw_thermal_slowdown"] = 1234.5
    by[1]["throttle_s"]["sync_boost"] = 7.5      # a bitmask figure: no *
    for reason in by[3]["throttle_s"]:
        by[3]["throttle_s"][reason] = None      # nothing logged
    return rep, {"n1/0": "sw_power_cap=300.0*; hw_thermal_slowdown=1,234.5*",   # bit order, counters starred
                 "n1/1": "sw_power_cap=300.0; sync_boost=7.5"}


def test_text_shows_throttle_time_by_reason(tmp_path):
    rep, expected = _throttle_run(tmp_path)
    txt = render(rep, "text", width=200)
    section = txt.split("Throttle time by reason (s)", 1)[1].split("Sources:", 1)[0]
    rows = dict(line.split(None, 1) for line in section.splitlines() if line.strip().startswith("n1/"))
    assert {gpu: cell.strip() for gpu, cell in rows.items()} == expected


def test_html_shows_throttle_time_by_reason(tmp_path):
    rep, expected = _throttle_run(tmp_path)
    page = render(rep, "html")
    table = page.split("<h2>GPUs</h2>", 1)[1].split("</table>", 1)[0]
    cells = [[htmllib.unescape(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)]
             for row in re.findall(r"<tr>(.*?)</tr>", table)]
    col = cells[0].index("throttle by reason s")
    assert {r[0]: r[col] for r in cells[1:]} == {**expected, "n1/2": "none", "n1/3": "n/a"}
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


def _chromium(html_path: Path, screenshot: Path = None, dump=True):
    with tempfile.TemporaryDirectory() as prof:
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0", "--window-size=1280,2000"]
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        p = subprocess.run(args + [html_path.as_uri()], capture_output=True, text=True, timeout=120)
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln]
    return p, console


def _console_errors(console):
    return [ln for ln in console if "Uncaught" in ln or "Error" in ln or ":ERROR:" in ln.split("CONSOLE")[0]]


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                    reason="chromium not installed (make deps installs it; in CI this test must run)")
def test_html_renders_in_headless_chromium(tmp_path):
    cluster(tmp_path / "run", hot=("n2", 3))
    rep = build_report(tmp_path / "run")
    html = render(rep, "html")
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained
    assert "https://" not in html
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / "report-test.html"
    page.write_text(html)
    p, console = _chromium(page)
    assert p.returncode == 0, p.stderr[-2000:]
    assert 'data-rendered="1"' in p.stdout, "inline script did not run"
    assert "<title>[rendered] hpclaunch report" in p.stdout
    assert p.stdout.count("<svg") >= 6
    assert not _console_errors(console), console
    shot = ARTIFACTS / "report-test.png"
    p2, console2 = _chromium(page, screenshot=shot)
    assert shot.exists() and shot.stat().st_size > 10_000
    assert not _console_errors(console2), console2


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                    reason="chromium not installed (make deps installs it; in CI this test must run)")
def test_console_error_detection_works(tmp_path):
    """Negative control: a page that throws must be caught by the same check."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>throw new Error('boom')</script></body></html>")
    p, console = _chromium(bad)
    assert _console_errors(console), p.stderr[-2000:]


def test_fleet_report(tmp_path):
    rows = []
    truth = {}
    for k, (user, part) in enumerate([("alice", "gpu"), ("bob", "gpu"), ("alice", "big")]):
        rd = tmp_path / f"job-{k}"
        exp = cluster(rd, hot=("n2", 3), metrics=False)
        truth[k] = exp["gpu_total"] + sum(exp["cpu"].values())
        rows.append({"id": 100 + k, "name": f"job{k}", "user": user, "partition": part, "run_dir": str(rd),
                     "submit_time": T0 + k})
    rows.append({"id": 999, "name": "gone", "user": "carol", "partition": "gpu", "run_dir": str(tmp_path / "nope"),
                 "submit_time": T0})
    fl = build_fleet_report(rows)
    d = fl.data
    assert d["by_user"]["alice"]["jobs"] == 2
    assert d["by_user"]["alice"]["energy_j"] == pytest.approx(truth[0] + truth[2], rel=1e-3)
    assert d["by_user"]["bob"]["energy_j"] == pytest.approx(truth[1], rel=1e-3)
    assert d["by_partition"]["gpu"]["jobs"] == 3  # carol's empty run dir counts, flagged
    assert d["energy_j"] == pytest.approx(sum(truth.values()), rel=1e-3)
    assert [j["id"] for j in d["jobs"][:3]] == sorted([100, 101, 102], key=lambda i: -truth[i - 100])
    out = d["gpu_slots"]["outliers"]
    assert [(o["host"], o["index"]) for o in out] == [("n2", 3)]
    assert d["hottest_nodes"][0]["host"] == "n2"
    assert any("999" in w for w in d["warnings"])
    # throttle per reason: GPU 1 of each host is power-capped 200-260 s in every job (synth)
    for j in d["jobs"][:3]:
        assert j["throttle_s"] == {"sw_power_cap": pytest.approx(3 * 60, abs=3)}, j["throttle_s"]
    assert d["throttle_s"] == {"sw_power_cap": pytest.approx(9 * 60, abs=9)}
    throttled = d["gpu_slots"]["most_throttled"]
    assert sorted((r["host"], r["index"]) for r in throttled) == [("n1", 1), ("n2", 1), ("n3", 1)]
    assert all(r["throttle_s"] == {"sw_power_cap": pytest.approx(3 * 60, abs=3)} for r in throttled)
    assert all(r["throttle_s"] == {} for r in d["gpu_slots"]["hottest"] if r["index"] != 1)
    txt = render_fleet(fl, "text", width=200)
    assert "alice" in txt and "n2/3" in txt
    assert re.search(r"GPU throttle over all jobs: sw_power_cap 5[3-4]\d s\n", txt) and "Most throttled GPU slots" in txt
    assert re.search(r"n1/1 .* sw_power_cap 1[78]\d s", txt), txt
    assert json.loads(render_fleet(fl, "json"))["jobs"][0]["throttle_s"]
    page = render_fleet(fl, "html")
    assert "data-rendered" in page and "Most throttled GPU slots" in page
    assert re.search(r"<td class=\"\">sw_power_cap 1[78]\d s</td>", page)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drop=st.floats(0, 0.3), jitter=st.floats(0, 0.45), reset=st.one_of(st.none(), st.floats(10, 290)),
       shuffle=st.booleans(), seed=st.integers(0, 10_000))
def test_property_counter_energy(tmp_path_factory, drop, jitter, reset, shuffle, seed):
    tmp = tmp_path_factory.mktemp("prop")
    g = GpuSpec("n1", 0, reset_at=reset, drop_frac=drop, period=37.0, ranks="0")
    exp = write_run(tmp, [g, GpuSpec("n1", 1, counter=False, drop_frac=drop, period=60.0)], duration=300,
                    jitter=jitter, shuffle=shuffle, seed=seed)
    rep = build_report(tmp)
    for gg in rep.data["gpus"]:
        e = exp["gpu"][(gg["host"], gg["index"])]
        assert abs(gg["energy_j"] - e) <= 1e-3 * e, (gg["energy_source"], gg["energy_j"], e)


@pytest.mark.parametrize("ys", [[1e308] * 3, [1e308, -1e308, 5.0], [float("inf"), 1e308, None], [0.0, 0.0]])
def test_charts_and_sparklines_of_huge_values_render(ys):
    """What reaches a chart is plausible (reports/plausible.py makes the rest missing), but a chart
    must not be where a report dies: 1e308 on every point made the HTML chart's span 0 (a
    ZeroDivisionError), ±1e308 the sparkline's inf (int(NaN)) (issue 44, item 9)."""
    from hpclaunch.reports.render_html import line_chart
    from hpclaunch.reports.render_text import sparkline

    svg = line_chart([("gpu0", list(range(len(ys))), ys, "#000")], "power", "W", band=(list(range(len(ys))), ys, ys))
    assert svg.startswith("<svg") and "nan" not in svg and "inf" not in svg, svg
    assert len(sparkline(ys, 10)) == len(ys)
