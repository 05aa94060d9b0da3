"""Report totals against analytically known synthetic logs (tolerance 0.1 %)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.reports.readers import have_pyarrow  # noqa: E402
from hpclaunch.cli import main as hpclaunch_main  # noqa: E402
from hpclaunch.reports import build_report, render  # noqa: E402

ENGINES = ["csv"] + (["pyarrow"] if have_pyarrow() else [])
REL = 1e-3  # 0.1 %


def gpu(rep, host, idx):
    return next(g for g in rep.data["gpus"] if g["host"] == host and g["index"] == idx)


def close(a, b, rel=REL):
    assert a is not None, "value is null"
    assert abs(a - b) <= rel * abs(b), f"{a} vs {b} ({(a - b) / b * 100:.4f} %)"


def two_by_two(**kw):
    specs = []
    for h in ("n1", "n2"):
        for i in range(2):
            specs.append(GpuSpec(h, i, a=200 + 30 * i, b=80, phase=0.7 * i + (h == "n2"), ranks=str(len(specs)), **kw))
    return specs


@pytest.mark.parametrize("engine", ENGINES)
def test_counter_energy_exact(tmp_path, engine):
    exp = write_run(tmp_path, two_by_two(), hosts=[HostSpec("n1"), HostSpec("n2")], duration=3600, jitter=0.2)
    rep = build_report(tmp_path, engine=engine)
    d = rep.data
    for (h, i), e in exp["gpu"].items():
        g = gpu(rep, h, i)
        assert g["energy_source"] == "counter"
        close(g["energy_j"], e, 1e-6)
        assert abs(g["crosscheck_pct"]) < 0.1
    close(d["energy_j"]["gpu"], exp["gpu_total"], 1e-6)
    close(d["energy_j"]["cpu"], sum(exp["cpu"].values()), 1e-6)
    close(d["energy_j"]["total"], exp["gpu_total"] + sum(exp["cpu"].values()), 1e-6)
    close(d["energy_kwh"]["total"], d["energy_j"]["total"] / 3.6e6, 1e-5)
    assert d["energy_j"]["complete"] is True
    assert d["duration_s"] == pytest.approx(3600, abs=0.5)
    node = next(n for n in d["nodes"] if n["host"] == "n1")
    close(node["energy_j"]["gpu"], exp["gpu"][("n1", 0)] + exp["gpu"][("n1", 1)], 1e-6)
    close(node["energy_j"]["cpu"], exp["cpu"]["n1"], 1e-6)
    assert node["monitor"]["cpu_pct_of_core"] == pytest.approx(0.4, rel=1e-3)
    assert node["monitor"]["max_rss_mib"] == 30.0
    # per rank: one rank per GPU
    for r in d["ranks"]:
        h, i = r["gpus"][0].split("/")
        close(r["energy_j"], exp["gpu"][(h, int(i))], 1e-6)
    # average / peak power
    g = gpu(rep, "n1", 1)
    w0, w1 = exp["window"][("n1", 1)]
    close(g["avg_power_w"], exp["gpu"][("n1", 1)] / (w1 - w0), 1e-6)
    assert g["max_power_w"] == pytest.approx(230 + 80, abs=0.05)
    assert g["power_headroom_w"] == pytest.approx(700 - 310, abs=0.05)
    assert d["power_w"]["gpu_peak"] <= sum(s.a + s.b for s in two_by_two()) + 1e-6
    assert not [w for w in d["warnings"] if "energy" in w.lower() and "metrics" not in w], d["warnings"]


@pytest.mark.parametrize("engine", ENGINES)
def test_integrated_power_without_counter(tmp_path, engine):
    exp = write_run(tmp_path, two_by_two(counter=False), duration=3600, jitter=0.3)
    rep = build_report(tmp_path, engine=engine)
    for (h, i), e in exp["gpu"].items():
        g = gpu(rep, h, i)
        assert g["energy_source"] == "integrated_power"
        assert g["crosscheck_pct"] is None
        close(g["energy_j"], e)
    close(rep.data["energy_j"]["gpu"], exp["gpu_total"])
    assert rep.data["energy_j"]["cpu"] is None
    assert any("no RAPL" in w or "no host log" in w for w in rep.data["warnings"])


@pytest.mark.parametrize("engine", ENGINES)
def test_counter_reset_and_wrap(tmp_path, engine):
    specs = [GpuSpec("n1", 0, reset_at=1800.5, ranks="0"),
             GpuSpec("n1", 1, counter_offset_mj=2**32 - 4.0e5, wrap_mod_mj=2**32, ranks="1")]
    exp = write_run(tmp_path, specs, duration=3600)
    rep = build_report(tmp_path, engine=engine)
    for (h, i), e in exp["gpu"].items():
        g = gpu(rep, h, i)
        assert g["energy_source"] == "counter"
        assert g["counter_resets"] == 1
        assert g["energy_estimated_j"] > 0
        assert abs(g["crosscheck_pct"]) < 0.1
        close(g["energy_j"], e)
    assert sum("reset" in w for w in rep.data["warnings"]) >= 2


@pytest.mark.parametrize("engine", ENGINES)
def test_missing_rows_and_partial_lines(tmp_path, engine):
    specs = two_by_two(drop_frac=0.05, missing_power_frac=0.03)
    specs[0].counter = False  # integrated power over missing rows too
    exp = write_run(tmp_path, specs, hosts=[HostSpec("n1"), HostSpec("n2")], duration=3600,
                    partial_last_line=True, metrics=dict(ranks=4, steps=50))
    rep = build_report(tmp_path, engine=engine)
    for (h, i), e in exp["gpu"].items():
        close(gpu(rep, h, i)["energy_j"], e)
    cov = rep.data["coverage"]
    assert cov["malformed_rows_skipped"] == 4  # 2 GPU files + 2 host files
    close(rep.data["energy_j"]["cpu"], sum(exp["cpu"].values()), 1e-4)
    assert any("unparsable line" in w for w in rep.data["warnings"])  # metrics partial lines


@pytest.mark.parametrize("engine", ENGINES)
def test_partial_line_cut_inside_last_cell_is_not_a_row(tmp_path, engine):
    """A killed writer's last line with the right cell count (cut inside its last cell, or just
    before its newline) is not a row: GPU and CPU energy stay exact, RSS is not the cut value."""
    exp = write_run(tmp_path, two_by_two(), hosts=[HostSpec("n1"), HostSpec("n2")], duration=3600,
                    jitter=0.2, partial_last_line="last_cell")
    synth.write_power_trace(tmp_path, "n1", gpus=2, n=100, spike=(50, 400.0), partial_last_line="last_cell")
    rep = build_report(tmp_path, engine=engine)
    d = rep.data
    for (h, i), e in exp["gpu"].items():
        g = gpu(rep, h, i)
        close(g["energy_j"], e, 1e-6)   # an extra sample would add a whole interval (~1/3600)
        assert g["samples"] == 3601
        assert g["coverage"]["last_unix"] == pytest.approx(exp["window"][(h, i)][1], abs=1e-3)
    close(d["energy_j"]["cpu"], sum(exp["cpu"].values()), 1e-6)  # an extra host row adds 5 s of RAPL
    for n in d["nodes"]:
        assert n["monitor"]["max_rss_mib"] == 30.0                 # not 31 from the cut "31.2"
    assert d["window"]["end_unix"] == pytest.approx(T0 + 3600, abs=1e-3)
    assert d["coverage"]["malformed_rows_skipped"] == 5           # 2 GPU + 2 host + 1 power trace
    assert gpu(rep, "n1", 0)["max_power_trace_w"] == 700.0


@pytest.mark.parametrize("engine", ENGINES)
def test_unsorted_overlapping_files(tmp_path, engine):
    exp = write_run(tmp_path, two_by_two(), duration=1800, jitter=0.1, shuffle=True, split_overlap=True,
                    partial_last_line=True)
    rep = build_report(tmp_path, engine=engine)
    assert len(rep.data["coverage"]["files"]["gpu"]) == 4
    assert rep.data["coverage"]["duplicate_rows_removed"] > 0
    for (h, i), e in exp["gpu"].items():
        g = gpu(rep, h, i)
        close(g["energy_j"], e, 1e-6)
        assert g["samples"] == 1801


def test_engines_agree(tmp_path):
    if not have_pyarrow():
        pytest.skip("pyarrow not installed")
    write_run(tmp_path, two_by_two(drop_frac=0.02), hosts=[HostSpec("n1")], duration=900, jitter=0.2,
              shuffle=True, split_overlap=True, partial_last_line=True, metrics=dict(ranks=4, steps=20))
    a = json.loads(render(build_report(tmp_path, engine="csv"), "json"))
    b = json.loads(render(build_report(tmp_path, engine="pyarrow"), "json"))
    a["coverage"].pop("reader")
    b["coverage"].pop("reader")
    assert a == b


@pytest.mark.parametrize("counter", [True, False])
def test_gap_listed_and_interpolated(tmp_path, counter):
    exp = write_run(tmp_path, [GpuSpec("n1", 0, counter=counter, gap=(1000.5, 1020.5), ranks="0")], duration=3600)
    rep = build_report(tmp_path)
    g = gpu(rep, "n1", 0)
    close(g["energy_j"], exp["gpu"][("n1", 0)])
    gaps = g["coverage"]["gaps"]
    assert len(gaps) == 1 and gaps[0]["duration_s"] == pytest.approx(21.0)
    assert gaps[0]["energy_method"] == ("counter (exact)" if counter else "linear interpolation")
    assert g["coverage"]["pct_of_job"] == pytest.approx(100 * (3600 - 21) / 3600, abs=0.01)
    assert any("sampling gap" in w for w in rep.data["warnings"])
    if not counter:
        assert g["energy_estimated_j"] > 0


def test_throttle_counters_preferred_over_bitmask(tmp_path):
    specs = [GpuSpec("n1", 0, throttle_window=(600, 900), ranks="0"),
             GpuSpec("n1", 1, throttle_window=(600, 900), viol_counters=False, ranks="1")]
    write_run(tmp_path, specs, duration=1800, jitter=0.2)
    rep = build_report(tmp_path)
    g0, g1 = gpu(rep, "n1", 0), gpu(rep, "n1", 1)
    assert g0["throttle_source"]["power"] == "violation_counter"
    assert g0["throttle_s"]["power"] == pytest.approx(300.0, abs=1e-6)
    assert g0["throttle_s"]["thermal"] == 0.0
    assert g0["throttle_s"]["sw_power_cap"] == pytest.approx(300.0, abs=1.0)
    assert g1["throttle_source"]["power"] == "bitmask"
    assert g1["throttle_s"]["power"] == pytest.approx(300.0, abs=1.0)
    assert g1["throttle_s"]["any_slowdown"] == pytest.approx(300.0, abs=1.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_per_reason_counters_preferred_over_bitmask(tmp_path, engine):
    """GPU 0 logs the per-reason counters: sw_power_cap and hw_thermal_slowdown come from them
    (hw thermal slowdowns too short for any sample's bitmask included); GPU 1 does not: bitmask."""
    specs = [GpuSpec("n1", 0, throttle_window=(600, 900), reason_counters=True,
                     hidden_hw_thermal=(1000, 1400, 0.25), ranks="0"),
             GpuSpec("n1", 1, throttle_window=(600, 900), hidden_hw_thermal=(1000, 1400, 0.25), ranks="1")]
    write_run(tmp_path, specs, duration=1800, jitter=0.2)
    rep = build_report(tmp_path, engine=engine)
    g0, g1 = gpu(rep, "n1", 0), gpu(rep, "n1", 1)
    for reason in ("sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                   "hw_power_brake_slowdown"):
        assert g0["throttle_source"][reason] == "violation_counter"
        assert g1["throttle_source"][reason] == "bitmask"
    assert g0["throttle_s"]["sw_power_cap"] == pytest.approx(300.0, abs=1e-6)
    assert g0["throttle_s"]["hw_thermal_slowdown"] == pytest.approx(100.0, abs=1e-6)
    assert g1["throttle_s"]["hw_thermal_slowdown"] == 0.0            # the bitmask never saw it
    assert g1["throttle_s"]["sw_power_cap"] == pytest.approx(300.0, abs=1.0)
    for reason in ("gpu_idle", "hw_slowdown", "display_clock_setting"):  # no counter for these
        assert g0["throttle_source"][reason] == "bitmask"
    assert rep.data["throttle_total_s"]["hw_thermal_slowdown"] == pytest.approx(100.0, abs=1e-3)
    assert not [w for w in rep.data["warnings"] if "columns absent" in w]


def test_per_reason_counter_reset_skips_that_interval_and_says_so(tmp_path):
    g = GpuSpec("n1", 0, throttle_window=(600, 900), reason_counters=True, reason_counter_reset_at=750.5,
                ranks="0")
    write_run(tmp_path, [g], duration=1800)
    rep = build_report(tmp_path)
    r = gpu(rep, "n1", 0)
    assert r["throttle_source"]["sw_power_cap"] == "violation_counter"
    assert r["throttle_s"]["sw_power_cap"] == pytest.approx(299.0, abs=1e-6)  # 750 -> 751 unknown
    assert any("throttle_sw_power_cap_ns went backwards 1 time" in w for w in rep.data["warnings"])


@pytest.mark.parametrize("engine", ENGINES)
def test_gpu_files_from_before_the_counter_columns_still_read(tmp_path, engine):
    exp = write_run(tmp_path, [GpuSpec("n1", 0, throttle_window=(600, 900), ranks="0")], duration=1800,
                    old_gpu_header=True, partial_last_line="last_cell")
    hdr = (tmp_path / "monitor" / "n1.gpu.csv").read_text().splitlines()[1]
    assert hdr.endswith(",error")
    rep = build_report(tmp_path, engine=engine)
    r = gpu(rep, "n1", 0)
    close(r["energy_j"], exp["gpu"][("n1", 0)], 1e-6)
    assert r["throttle_source"]["sw_power_cap"] == "bitmask"
    assert r["throttle_s"]["sw_power_cap"] == pytest.approx(300.0, abs=1.0)
    assert r["throttle_source"]["power"] == "violation_counter"
    assert not [w for w in rep.data["warnings"] if "columns absent" in w or "schema" in w]


def test_old_and_new_gpu_files_of_one_gpu_merge(tmp_path):
    """A requeue across an upgrade: the old attempt's file lacks the counter columns, the new one
    has them: the counter gives the new file's span, the bitmask the part before it (not lost)."""
    import shutil
    write_run(tmp_path / "a", [GpuSpec("n1", 0, throttle_window=(600, 900), ranks="0")], duration=1800,
              old_gpu_header=True)
    write_run(tmp_path / "b", [GpuSpec("n1", 0, throttle_window=(600, 900), reason_counters=True, ranks="0")],
              duration=1800)
    a = (tmp_path / "a" / "monitor" / "n1.gpu.csv").read_text().splitlines(keepends=True)
    b = (tmp_path / "b" / "monitor" / "n1.gpu.csv").read_text().splitlines(keepends=True)
    run = tmp_path / "run" / "monitor"
    run.mkdir(parents=True)
    (run / "n1.old.gpu.csv").write_text("".join(a[:2 + 700]))     # t = 0..699 s
    (run / "n1.gpu.csv").write_text("".join(b[:2] + b[2 + 700:]))  # t = 700..1800 s
    shutil.rmtree(tmp_path / "a")
    r = gpu(build_report(tmp_path / "run"), "n1", 0)
    assert r["samples"] == 1801
    assert r["throttle_source"]["sw_power_cap"] == "violation_counter+bitmask"
    assert r["throttle_s"]["sw_power_cap"] == pytest.approx(300.0, abs=1e-6)  # 600..700 bitmask, 700..900 counter
    assert r["throttle_source"]["power"] == "violation_counter"  # viol_power_ns is in both files


@pytest.mark.parametrize("every", [5, 30])
def test_counter_read_every_few_samples_keeps_totals_and_idle_energy(tmp_path, every):
    """The monitor reads the energy counter every --counter-interval (5 s) and at its last sample:
    the total stays the counter's exact difference, idle energy is split by the power between
    readings (an idle window that starts and ends between two readings), and sparse readings are
    no gaps. The same run with a reading at every sample agrees."""
    spec = dict(idle_window=(2003, 2617), throttle_window=(100, 160), reason_counters=True,
                hidden_hw_thermal=(500, 900, 0.25), ranks="0")
    exp = write_run(tmp_path / "sparse", [GpuSpec("n1", 0, counter_every=every, **spec)], duration=3600)
    write_run(tmp_path / "dense", [GpuSpec("n1", 0, **spec)], duration=3600)
    sparse, dense = (gpu(build_report(tmp_path / d), "n1", 0) for d in ("sparse", "dense"))
    g = GpuSpec("n1", 0, **spec)
    assert sparse["energy_source"] == "counter"
    close(sparse["energy_j"], exp["gpu_total"], rel=1e-9)
    assert sparse["energy_estimated_j"] == 0 and sparse["energy_notes"] == []
    # dense: each 1 s interval idle or not by its left sample (idle from 2003 s to 2617 s)
    close(dense["idle_energy_j"], g.integral(T0 + 2003, T0 + 2617))
    close(sparse["idle_energy_j"], dense["idle_energy_j"], rel=1e-4)
    assert sparse["throttle_s"]["hw_thermal_slowdown"] == pytest.approx(100.0, abs=1e-6)
    assert sparse["throttle_s"]["sw_power_cap"] == pytest.approx(60.0, abs=1e-6)
    assert abs(sparse["crosscheck_pct"]) < 0.01


def test_near_slowdown_and_idle_energy(tmp_path):
    g = GpuSpec("n1", 0, hot_window=(100, 400), idle_window=(2000, 2600), ranks="0")
    write_run(tmp_path, [g], duration=3600)
    rep = build_report(tmp_path)
    r = gpu(rep, "n1", 0)
    assert r["time_near_slowdown_s"] == pytest.approx(300.0, abs=1.0)
    assert r["max_temp_c"] == 86.0 and r["slowdown_margin_c"] == 3.0
    assert r["max_mem_temp_c"] == 90.0
    close(r["idle_energy_j"], g.integral(T0 + 2000, T0 + 2600))
    assert r["idle_s"] == pytest.approx(600.0, abs=1.0)
    assert r["throttle_s"]["gpu_idle"] == pytest.approx(600.0, abs=1.0)
    close(rep.data["idle"]["energy_j"], g.integral(T0 + 2000, T0 + 2600))
    assert r["avg_util_pct"] == pytest.approx(95 * (1 - 600 / 3601), abs=0.1)
    assert r["max_mem_used_mib"] == 40000


def test_missing_data_is_null_with_warning(tmp_path):
    write_run(tmp_path, [GpuSpec("n1", 0, util=False, slowdown=None, viol_counters=False)], duration=600)
    rep = build_report(tmp_path)
    d = rep.data
    g = gpu(rep, "n1", 0)
    assert g["avg_util_pct"] is None and g["idle_energy_j"] is None
    assert g["time_near_slowdown_s"] is None and g["slowdown_margin_c"] is None
    assert d["energy_j"]["cpu"] is None and d["energy_j"]["complete"] is False
    assert d["energy_j"]["gpu"] > 0
    assert d["efficiency"]["energy_per_sample_j"] is None
    w = " | ".join(d["warnings"])
    for needle in ("utilisation not measured", "slowdown threshold not reported", "no host log",
                   "no metrics", "rank-to-GPU"):
        assert needle in w, needle
    json.loads(render(rep, "json"))  # no NaN in the document


def test_no_logs_at_all(tmp_path):
    rep = build_report(tmp_path)
    d = rep.data
    assert d["energy_j"]["total"] is None and d["duration_s"] is None
    assert any("no GPU logs" in w for w in d["warnings"])
    json.loads(render(rep, "json"))
    assert "n/a" in render(rep, "text")
    assert "data-rendered" in render(rep, "html")


def test_shared_gpu_split_evenly(tmp_path):
    exp = write_run(tmp_path, [GpuSpec("n1", 0, ranks="0;1"), GpuSpec("n1", 1, ranks="2")], duration=600,
                    metrics=dict(ranks=3, steps=10))
    rep = build_report(tmp_path)
    ranks = {r["rank"]: r for r in rep.data["ranks"]}
    half = exp["gpu"][("n1", 0)] / 2
    close(ranks[0]["energy_j"], half, 1e-6)
    close(ranks[1]["energy_j"], half, 1e-6)
    assert ranks[0]["gpu_shared_by"] == 2 and "even" in ranks[0]["energy_split"]
    assert gpu(rep, "n1", 0)["shared"] is True
    assert "split evenly" in render(rep, "text")


def test_metrics_efficiency_and_stragglers(tmp_path):
    exp = write_run(tmp_path, two_by_two(), hosts=[HostSpec("n1"), HostSpec("n2")], duration=1200,
                    metrics=dict(ranks=4, steps=200, slow_rank=2, slow_factor=1.25, samples=32))
    rep = build_report(tmp_path)
    d = rep.data
    st = d["stragglers"]
    assert st["slowest_rank"] == 2 and st["slowest_ratio"] == pytest.approx(1.25)
    assert [r["rank"] for r in st["ranks"]] == [2]
    assert st["spread_pct"] == pytest.approx(25.0)
    ef = d["efficiency"]
    assert ef["steps"] == 200 and ef["samples"] == 4 * 200 * 32
    total = exp["gpu_total"] + sum(exp["cpu"].values())
    close(ef["energy_per_sample_j"]["total"], total / (4 * 200 * 32), 1e-5)
    close(ef["energy_per_step_j"]["gpu"], exp["gpu_total"] / 200, 1e-5)
    assert len(rep.series["loss"]) == 200
    assert rep.series["loss"][0][1] == pytest.approx(2.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_metrics_logged_every_10_steps_count_every_step(tmp_path, engine):
    exp = write_run(tmp_path, two_by_two(), hosts=[HostSpec("n1"), HostSpec("n2")], duration=1200,
                    metrics=dict(ranks=4, steps=200, samples=32, log_every=10))
    d = build_report(tmp_path, engine=engine).data
    ef = d["efficiency"]
    assert ef["steps"] == 200 and ef["samples"] == 4 * 200 * 32
    total = exp["gpu_total"] + sum(exp["cpu"].values())
    close(ef["energy_per_sample_j"]["total"], total / (4 * 200 * 32), 1e-5)
    close(ef["energy_per_step_j"]["gpu"], exp["gpu_total"] / 200, 1e-5)


def test_job_identity_from_dir_and_yaml(tmp_path):
    rd = tmp_path / "runs" / "my-train-123456"
    write_run(rd, [GpuSpec("n1", 0)], duration=60, job_yaml="name: my-train\nuser: alice\n")
    d = build_report(rd).data
    assert d["job"]["id"] == "123456" and d["job"]["name"] == "my-train"


def test_report_cli(tmp_path, capsys, hpc_home):
    """`hpclaunch report RUN_DIR`: the one report command (the second, non-atomic one is gone)."""
    def main_report(args):
        return hpclaunch_main(["report"] + args)

    write_run(tmp_path / "run", two_by_two(), hosts=[HostSpec("n1"), HostSpec("n2")], duration=300,
              metrics=dict(ranks=4, steps=20))
    out = tmp_path / "r.json"
    assert main_report([str(tmp_path / "run"), "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["schema"] == "hpclaunch.report/1"
    assert main_report([str(tmp_path / "run"), "--format", "text"]) == 0
    txt = capsys.readouterr().out
    assert "Energy" in txt and any(ch in txt for ch in "▁▂▃▄▅▆▇█")
    assert main_report([str(tmp_path / "run"), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main_report([str(tmp_path / "missing")]) == 2


def test_power_trace_peak(tmp_path):
    import csv

    from hpclaunch.monitors import schema
    write_run(tmp_path, [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1")], duration=60)
    with open(tmp_path / "monitor" / schema.power_trace_file("n1"), "w", newline="") as f:
        f.write(schema.header_comment(schema.POWER_TRACE_SCHEMA))
        w = csv.writer(f, lineterminator="\n")
        w.writerow(schema.POWER_TRACE_COLUMNS)
        for k in range(600):
            w.writerow([T0 + k * 0.1, "n1", 0, 300 + (400 if k == 123 else 0)])
    rep = build_report(tmp_path)
    assert gpu(rep, "n1", 0)["max_power_trace_w"] == 700
    assert gpu(rep, "n1", 0)["trace_interval_s"] == pytest.approx(0.1)
    assert gpu(rep, "n1", 1)["max_power_trace_w"] is None


def test_restarted_writer_appends_header_and_error_rows(tmp_path):
    """A daemon restart that appends a new schema line + header to the same file, and rows whose
    `error` cell is set (no measurements): energy still exact, errors counted and warned."""
    import csv

    from hpclaunch.monitors import schema
    g = GpuSpec("n1", 0, ranks="0")
    exp = write_run(tmp_path, [g], duration=1200)
    path = tmp_path / "monitor" / schema.gpu_file("n1")
    lines = path.read_text().splitlines(keepends=True)
    body = lines[2:]
    cut = len(body) // 2
    rows_err = [{"time_unix": repr(T0 + 10000 + k), "host": "n1", "gpu_index": 0, "gpu_uuid": "GPU-n1-00",
                 "error": "NVML_ERROR_GPU_IS_LOST"} for k in range(3)]
    with open(path, "w", newline="") as f:
        f.writelines(lines[:2] + body[:cut])
        f.write(schema.header_comment(schema.GPU_SCHEMA))
        f.write(",".join(schema.GPU_COLUMNS) + "\n")
        f.writelines(body[cut:])
        w = csv.writer(f, lineterminator="\n")
        for r in rows_err:
            w.writerow([r.get(c, "") for c in schema.GPU_COLUMNS])
    for engine in ENGINES:
        rep = build_report(tmp_path, engine=engine)
        r = gpu(rep, "n1", 0)
        # the error rows carry no power/counter: the energy window is unchanged
        close(r["energy_j"], exp["gpu"][("n1", 0)], 1e-6)
        assert r["error_rows"] == 3
        assert any("NVML_ERROR_GPU_IS_LOST" in w for w in rep.data["warnings"])
    assert build_report(tmp_path).data["coverage"]["reader"][0].startswith(("csv", "pyarrow"))


def test_the_report_uses_the_interval_the_daemon_recorded(tmp_path):
    """Issue 12: the daemon writes interval_s into its events header; the report uses that one
    value (here 2 s) rather than estimating it from the timestamps (which say 1 s), so a 4 s hole
    is within 3 intervals and no gap. Without a header value it estimates, and says so."""
    from hpclaunch.monitors import schema
    spec = [GpuSpec("n1", 0, gap=(100.0, 103.5))]
    recorded, estimated = tmp_path / "recorded", tmp_path / "estimated"
    for rd in (recorded, estimated):
        write_run(rd, spec, duration=300, interval=1.0)
    synth.write_events(recorded, "n1", [(0.5, "header", {"schema": schema.EVENTS_SCHEMA, "interval_s": 2.0})])
    synth.write_events(estimated, "n1", [])
    with_header = build_report(recorded).data
    g = with_header["gpus"][0]
    assert g["interval_s"] == 2.0 and g["interval_source"] == "recorded", g["interval_s"]
    assert g["coverage"]["n_gaps"] == 0, g["coverage"]
    assert not any("sampling interval not recorded" in w for w in with_header["warnings"])
    without = build_report(estimated).data
    g = without["gpus"][0]
    assert g["interval_s"] == 1.0 and g["interval_source"] == "estimated" and g["coverage"]["n_gaps"] == 1, g
    assert any("sampling interval not recorded for n1" in w for w in without["warnings"]), without["warnings"]
