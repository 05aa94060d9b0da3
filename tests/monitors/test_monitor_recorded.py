"""The NVML recorder and the recordings it made of real GPUs.

record_nvml.py wraps the real binding on a machine with a GPU (bench/gpu/gpu_checks.py) and writes a
scenario the fake replays. Here it wraps the fake itself: what it records, replayed through the fake,
must give the daemon the same rows. Recordings of real boards in recorded/ replay through the daemon
and the report: energy from the counter, equal to the counter's own difference.
"""

import glob
import json
import os
import subprocess
import sys

import pytest
from monitor_helpers import FAKE_PATH, HERE, read_csv

RECORDER = os.path.join(HERE, "record_nvml.py")
RECORDINGS = sorted(glob.glob(os.path.join(HERE, "recorded", "*.json")))
# Columns that the daemon computes from the clock, not from NVML.
CLOCK_COLUMNS = {"time_unix"}


def daemon(run_dir, env, seconds, interval=0.2, counter_interval=1.0):
    cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", str(interval), "--duration", str(seconds),
           "--counter-interval", str(counter_interval), "--run-dir", str(run_dir), "--host", "rec",
           "--no-power-trace"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCLAUNCH_", "CUDA_"))}
    proc = subprocess.run(cmd, env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return read_csv(os.path.join(run_dir, "monitor", "rec.gpu.csv"))[2]


def test_a_recording_of_the_fake_replays_the_same_rows(tmp_path):
    rec = tmp_path / "recording.json"
    recorded = daemon(tmp_path / "a", {"HPCLAUNCH_MONITOR_FAKE_NVML": RECORDER, "HPCLAUNCH_NVML_RECORD": str(rec),
                                       "HPCLAUNCH_NVML_RECORD_FROM": FAKE_PATH}, seconds=2.0)
    sc = json.loads(rec.read_text())
    assert [d["uuid"] for d in sc["devices"]] == [r["gpu_uuid"] for r in recorded[:2]]
    assert sc["recorded"]["call_timing"]["nvmlDeviceGetFieldValues"]["calls"] >= len(recorded)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(sc))
    replayed = daemon(tmp_path / "b", {"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH,
                                       "HPCLAUNCH_FAKE_NVML_SCENARIO": str(replay)}, seconds=2.0)
    n = min(len(recorded), len(replayed))
    assert n >= 8
    for a, b in zip(recorded[:n], replayed[:n]):
        assert {k: v for k, v in a.items() if k not in CLOCK_COLUMNS} == \
               {k: v for k, v in b.items() if k not in CLOCK_COLUMNS}


def test_recordings_of_real_gpus_are_here():
    """At least one board recorded on a real driver: the fake is not only hand-made."""
    assert RECORDINGS, "no recording in tests/monitors/recorded/ (bench/gpu/gpu_checks.py makes one)"
    for path in RECORDINGS:
        sc = json.load(open(path))
        assert sc["recorded"]["by"] == "tests/monitors/record_nvml.py" and sc["driver"], path
        assert sc["recorded"]["gpu_names"], path


@pytest.mark.parametrize("path", RECORDINGS, ids=[os.path.basename(p) for p in RECORDINGS])
def test_a_real_gpu_replayed_through_daemon_and_report(path, tmp_path):
    """The board's own values, in the order it gave them, through the daemon and the report: 20x
    faster than recorded (1 s samples, counters every 5 s -> 0.05 s and 0.25 s)."""
    sc = json.load(open(path))
    series = sc["devices"][0]["series"]
    # samples, inside what was recorded: the temperatures (one a sample) and the energy counter (one
    # each 5 samples, plus the probe's and the final sample's reads, with 2 to spare: a run that ends
    # on a counter sample reads it twice over)
    n = min(len(series["temp_c"]) - 8, (len(series["energy_mj"]) - 5) * 5)
    rows = [r for r in daemon(tmp_path, {"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH,
                                         "HPCLAUNCH_FAKE_NVML_SCENARIO": path},
                              seconds=0.05 * n, interval=0.05, counter_interval=0.25) if r["gpu_index"] == "0"]
    assert [int(float(r["temp_c"])) for r in rows] == series["temp_c"][:len(rows)]
    assert [round(float(r["power_w"]) * 1000) for r in rows] == series["power_instant_mw"][1:len(rows) + 1]
    energy = [int(r["energy_mj"]) for r in rows if r["energy_mj"]]
    assert len(energy) >= 3 and energy == series["energy_mj"][1:len(energy) + 1]   # the probe read [0]
    assert all(r["viol_power_ns"] == r["throttle_sw_power_cap_ns"] for r in rows)   # one counter, one read
    from hpclaunch.reports import build_report
    g = build_report(str(tmp_path)).data["gpus"][0]
    assert g["energy_source"] == "counter" and g["energy_notes"] == []
    assert g["energy_j"] == pytest.approx((energy[-1] - energy[0]) / 1000.0, rel=1e-9)
    assert g["max_temp_c"] == max(int(float(r["temp_c"])) for r in rows)
    assert g["throttle_s"]["sw_power_cap"] > 0                  # the H100 held its 700 W cap under load
