"""The daemon end to end, as a subprocess with the fake NVML (HPCLAUNCH_MONITOR_FAKE_NVML)."""

import json
import os
import signal
import stat
import statistics
import subprocess
import sys
import time

import pytest

from hpclaunch.monitors import schema
from monitor_helpers import FAKE_PATH, read_csv, read_events

HOST = "node7"


def start(run_dir, *extra, scenario=None, env_extra=None, interval=0.2):
    env = dict(os.environ)
    for k in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID"):
        env.pop(k, None)
    env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH, "HPCLAUNCH_TASKS_PER_NODE": "2",
                "PYTHONUNBUFFERED": "1"})
    if scenario is not None:
        p = os.path.join(str(run_dir), "scenario.json")
        with open(p, "w") as f:
            json.dump(scenario, f)
        env["HPCLAUNCH_FAKE_NVML_SCENARIO"] = p
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", str(interval),
           "--run-dir", str(run_dir), "--host", HOST, *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(path, n, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and open(path).read().count("\n") >= n + 2:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path}: fewer than {n} rows after {timeout}s")


def mon(run_dir, name):
    return os.path.join(str(run_dir), schema.MONITOR_DIR, name)


def test_rows_at_the_interval_and_sigterm_exits_0(tmp_path):
    p = start(tmp_path)
    host_csv = mon(tmp_path, schema.host_file(HOST))
    wait_for_rows(host_csv, 1)
    time.sleep(2.5)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err

    first, header, rows = read_csv(host_csv)
    assert first == "# schema=" + schema.HOST_SCHEMA and tuple(header) == schema.HOST_COLUMNS
    assert 12 <= len(rows) <= 15
    t = [float(r["time_unix"]) for r in rows]
    dt = [b - a for a, b in zip(t, t[1:])]
    assert abs(statistics.median(dt) - 0.2) <= 0.01
    assert sum(0.18 <= d <= 0.22 for d in dt) >= 0.9 * len(dt), dt
    assert rows[0]["cpu_pct"] == "" and all(r["cpu_pct"] != "" for r in rows[1:])
    assert all(r["rapl_energy_uj"] == "" for r in rows)  # no RAPL here: empty, never 0
    assert all(float(r["monitor_rss_mib"]) > 1 for r in rows)

    _, gh, grows = read_csv(mon(tmp_path, schema.gpu_file(HOST)))
    assert tuple(gh) == schema.GPU_COLUMNS
    assert len(grows) == 2 * len(rows)
    assert {r["ranks"] for r in grows} == {"0", "1"}
    # The costly counters (monitors/nvml.py COUNTER_FIELDS) at the first sample and the closing one
    # that SIGTERM brings, 2.5 s apart (< --counter-interval 5): empty between, never 0.
    costly = {"energy_mj", "viol_thermal_ns", "throttle_hw_thermal_slowdown_ns", "throttle_hw_power_brake_slowdown_ns"}
    read = [i for i, r in enumerate(grows) if r["energy_mj"]]
    assert read == [0, 1, len(grows) - 2, len(grows) - 1], read
    assert all((r[c] != "") == (i in read) for i, r in enumerate(grows) for c in costly)
    assert all(r[c] == "0" for r in grows for c in schema.THROTTLE_COUNTER_COLUMNS.values() if c not in costly)
    _, th, trows = read_csv(mon(tmp_path, schema.power_trace_file(HOST)))
    assert tuple(th) == schema.POWER_TRACE_COLUMNS and len(trows) >= 2 * 10

    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    kinds = [e["kind"] for e in ev]
    assert kinds[0] == "header" and ev[0]["detail"]["schema"] == schema.EVENTS_SCHEMA
    assert set(kinds) <= set(schema.EVENT_KINDS)
    assert kinds[-2:] == ["monitor_stats", "stopped"] and ev[-1]["detail"]["reason"] == "SIGTERM"
    stats = ev[-2]["detail"]
    assert stats["samples"] == len(rows) and stats["skipped_slots"] == 0
    assert 0 < stats["cpu_s_per_sample"] < 0.05
    unavailable = {e["detail"]["source"] for e in ev if e["kind"] == "source_unavailable"}
    assert {"rapl", "cpu_temp", "jetson"} <= unavailable
    assert all(e["host"] == HOST and isinstance(e["time_unix"], float) for e in ev)


def test_sigkill_leaves_files_whose_complete_rows_parse_then_requeue_appends(tmp_path):
    lost = {"error": 15}
    scenario = {"devices": [
        {"uuid": "GPU-a", "unsupported": ["energy_mj"],
         "series": {"power_instant_mw": [90000], "power_average_mw": [88000], "power_usage_mw": [88000],
                    "mem_temp_c": [40], "temp_c": [50, 51, lost, 52], "mem_used_mib": [100],
                    "mem_total_mib": [81559], "util_gpu": [50], "util_mem": [10], "sm_clock": [1980],
                    "mem_clock": [2619], "power_limit_mw": [700000], "clocks_event_reasons": [0],
                    "viol_power_ns": [0], "viol_thermal_ns": [0], "ecc_dbe": [0],
                    "slowdown_c": [89], "shutdown_c": [92]}}]}
    p = start(tmp_path, scenario=scenario, interval=0.05)
    gpu_csv = mon(tmp_path, schema.gpu_file(HOST))
    wait_for_rows(gpu_csv, 8)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=10)
    assert p.returncode == -signal.SIGKILL
    _, header, rows = read_csv(gpu_csv)
    assert len(rows) >= 8
    for r in rows:
        assert r["energy_mj"] == ""              # lacking the counter: empty, never 0
        assert r["throttle_sw_power_cap_ns"] == ""  # a driver without the per-reason fields: empty
        float(r["time_unix"])
    errs = [r for r in rows if r["error"]]
    assert len(errs) == 1 and errs[0]["power_w"] == "" and "GPU is lost" in errs[0]["error"]
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    assert any(e["kind"] == "source_unavailable" and e["detail"].get("capability") == "energy_counter"
               for e in ev)
    assert [e["detail"]["counters"] for e in ev if e["detail"].get("capability") == "clocks_event_counters"] == [
        list(schema.THROTTLE_COUNTER_COLUMNS)]
    assert "stopped" not in [e["kind"] for e in ev]  # SIGKILL: no goodbye, files still fine
    n_before = len(rows)

    # the requeued attempt appends to the same files, without a second header
    p = start(tmp_path, "--duration", "0.3", scenario=scenario, interval=0.1)
    _, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    text = open(gpu_csv).read()
    assert text.count("# schema=") == 1 and text.count("time_unix,") == 1
    _, _, rows = read_csv(gpu_csv)
    assert len(rows) >= n_before + 3
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    assert [e["kind"] for e in ev].count("header") == 2
    assert ev[-1]["kind"] == "stopped" and ev[-1]["detail"]["reason"] == "duration"


def test_full_disk_drops_samples_says_so_once_and_keeps_running(tmp_path):
    os.makedirs(mon(tmp_path, ""))
    # /dev/full's own numbers: a link to it would be moved aside (a log is never written through a link)
    os.mknod(mon(tmp_path, schema.host_file(HOST)), stat.S_IFCHR | 0o666, os.makedev(1, 7))
    p = start(tmp_path, "--duration", "0.6", "--no-nvml", interval=0.1)
    _, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    assert err.count("disk full") == 1, err
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    full = [e for e in ev if e["kind"] == "disk_full"]
    assert len(full) == 1 and full[0]["detail"]["errno"] == 28
    stats = [e for e in ev if e["kind"] == "monitor_stats"][0]["detail"]
    assert stats["samples"] >= 5 and stats["dropped_writes"][schema.host_file(HOST)] >= 5


def test_real_nvml_binding_without_a_gpu_runs_and_says_why(tmp_path):
    env = {"HPCLAUNCH_MONITOR_FAKE_NVML": ""}
    p = start(tmp_path, "--duration", "0.3", env_extra=env, interval=0.1)
    _, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    nv = [e["detail"] for e in ev if e["detail"].get("source") == "nvml"]
    if nv[0].get("reason"):  # no GPU here
        assert not os.path.exists(mon(tmp_path, schema.gpu_file(HOST)))


@pytest.mark.parametrize("argv", [["--interval", "0"], []])
def test_bad_arguments(argv, tmp_path, monkeypatch):
    from hpclaunch.monitors.daemon import parse_args
    monkeypatch.delenv("HPCLAUNCH_RUN_DIR", raising=False)
    with pytest.raises(SystemExit) as e:
        parse_args(argv + ([] if not argv else ["--run-dir", str(tmp_path)]))
    assert e.value.code == 2
