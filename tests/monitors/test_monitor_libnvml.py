"""The real nvidia-ml-py binding over a fake C library (tests/monitors/fake_libnvml.c, built here):
pynvml's ctypes structures, unions and error mapping in the path, as on a GPU node, with values the
library answers from a formula. The daemon's rows, and the field batch read straight from the C
array (monitors/nvml_batch.py) against pynvml's own wrapper."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
from monitor_helpers import HERE, read_csv, read_events

SOURCE = os.path.join(HERE, "fake_libnvml.c")


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("libnvml")
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(d / "libnvidia-ml.so.1"), SOURCE],
                   check=True, capture_output=True, text=True)
    return d


def _env(libdir, gpus):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCLAUNCH_", "CUDA_"))}
    env.update(LD_LIBRARY_PATH=str(libdir), FAKE_LIBNVML_GPUS=str(gpus))
    return env


def test_the_daemon_through_the_real_binding_logs_what_the_library_answers(libdir, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.25", "--duration", "2",
                           "--counter-interval", "0.25", "--run-dir", str(tmp_path), "--host", "lib"],
                          env=_env(libdir, 2), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _, header, rows = read_csv(str(tmp_path / "monitor" / "lib.gpu.csv"))
    assert len(rows) >= 8 and {r["gpu_index"] for r in rows} == {"0", "1"}
    for r in rows:
        i = int(r["gpu_index"])
        assert r["gpu_uuid"] == f"GPU-fa4e11b0-0000-4000-8000-{i:012d}" and not r["error"], r
        assert float(r["power_w"]) == float(r["power_avg_w"]) == 300 + 10 * i
        assert (int(r["temp_c"]), float(r["mem_used_mib"]), float(r["mem_total_mib"])) == (45 + i, 40000, 81559)
        assert (int(r["util_pct"]), int(r["sm_clock_mhz"]), float(r["power_limit_w"])) == (90, 1980, 700)
        assert (int(r["slowdown_temp_c"]), int(r["shutdown_temp_c"]), int(r["throttle_reasons"])) == (89, 92, 0)
    # the energy counter (a field of the batch, ull in the value union) is the power's integral
    g0 = [r for r in rows if r["gpu_index"] == "0" and r["energy_mj"]]
    t = [float(r["time_unix"]) for r in g0]
    e = [int(r["energy_mj"]) for r in g0]
    assert len(g0) >= 4 and e == sorted(e)
    assert (e[-1] - e[0]) / (t[-1] - t[0]) == pytest.approx(300_000, rel=0.05)  # mJ/s = 300 W
    trace = read_csv(str(tmp_path / "monitor" / "lib.power_trace.csv"))[2]
    assert trace and {round(float(r["power_w"])) for r in trace if r["gpu_index"] == "1"} <= set(range(310, 312))
    ev = {e["kind"]: e["detail"] for e in read_events(str(tmp_path / "monitor" / "lib.events.jsonl"))}
    assert ev["source_available"]["driver"] == "550.0-fake"
    assert ev["source_available"]["fields"]["0"] == [186, 185, 83, 82, 75, 74, 76, 269, 270, 271]
    assert ev["source_available"]["xid_events"] == [0, 1]


BATCH = textwrap.dedent("""
    import json, types
    import pynvml
    from hpclaunch.monitors.nvml_batch import FieldBatch, PowerSamples, results
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    ids = [186, 83, 82, 9999, 74]
    batch = FieldBatch(pynvml, h, ids)
    direct = [batch.read() for _ in range(2)]
    # an entry the driver leaves unwritten (the fake's 9998 after GPU 0's first batch) reads as in
    # pynvml's fresh array, never as the last call's answer
    once = FieldBatch(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), [9998, 186])
    unwritten = [once.read(), once.read(), results(pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(0), [9998, 186]))]
    wrapper = results(pynvml.nvmlDeviceGetFieldValues(h, ids))
    # a wrapper module (as record_nvml.py is) keeps its calls: no direct path
    wrap = types.ModuleType("wrap")
    calls = []
    def nvmlDeviceGetFieldValues(handle, fids):
        calls.append(list(fids))
        return pynvml.nvmlDeviceGetFieldValues(handle, fids)
    wrap.nvmlDeviceGetFieldValues = nvmlDeviceGetFieldValues
    wrap._nvmlGetFunctionPointer = pynvml._nvmlGetFunctionPointer
    wrapped = FieldBatch(wrap, h, ids)
    wrap_samples = types.ModuleType("wrap_samples")
    wrap_samples.nvmlDeviceGetSamples = lambda *a: pynvml.nvmlDeviceGetSamples(*a)
    wrap_samples.NVML_TOTAL_POWER_SAMPLES = pynvml.NVML_TOTAL_POWER_SAMPLES
    via_wrapper = wrapped.read()
    try:
        FieldBatch(pynvml, pynvml.c_nvmlDevice_t(), ids).read()
        bad = None
    except pynvml.NVMLError as e:
        bad = e.value
    # the power samples: read from C memory, and through pynvml's wrapper, since the same time stamp
    import time
    since = int(time.time() * 1e6) - 1_500_000
    samples = PowerSamples(pynvml, h)
    direct_samples = samples.read(since)
    wrapped_samples = PowerSamples(wrap_samples, h).read(since)
    try:
        samples.read(int(time.time() * 1e6) + 10_000_000)
        none_newer = None
    except pynvml.NVMLError as e:
        none_newer = e.value
    # each per-sample getter called directly, and pynvml's wrapper of it
    import functools
    from hpclaunch.monitors.nvml_getters import GETTERS, Getters
    get = Getters(pynvml, h)
    getters = {}
    for name, (public, consts, _) in GETTERS.items():
        mine = getattr(get, name)
        d = mine()
        p = getattr(pynvml, public)(h, *[getattr(pynvml, c) for c in consts])
        if hasattr(d, "_fields_"):
            d, p = ({f: getattr(x, f) for f, _ in x._fields_} for x in (d, p))
        getters[name] = [d, p, isinstance(mine, functools.partial)]
    print(json.dumps({"getters": getters, "direct": direct, "wrapper": wrapper, "via_wrapper": via_wrapper, "calls": calls,
                      "fast": batch._array is not None, "wrapped_fast": wrapped._array is not None, "bad": bad,
                      "samples": [direct_samples, wrapped_samples], "unwritten": unwritten, "none_newer": none_newer,
                      "samples_fast": samples._lookup is not None}))
""")


def test_the_field_batch_read_from_c_memory_equals_pynvmls_own_reading(libdir):
    proc = subprocess.run([sys.executable, "-c", BATCH], env=_env(libdir, 2), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["fast"] and not out["wrapped_fast"]
    for answer in out["direct"] + [out["wrapper"], out["via_wrapper"]]:
        (p_ret, p), (e_ret, energy), (t_ret, temp), (u_ret, unknown), (v_ret, viol) = answer
        assert (p_ret, p, t_ret, temp, v_ret, viol) == (0, 310_000, 0, 51, 0, 0)
        assert (u_ret, unknown) == (2, None)  # a field id the driver does not know: INVALID_ARGUMENT
        assert e_ret == 0 and energy >= 1_000_000
    assert out["calls"] == [[[186, 0], [83, 0], [82, 0], [9999, 0], [74, 0]]]
    assert out["bad"] == 2  # the call's own failure raises the binding's NVMLError, as pynvml's does
    first, again, theirs = out["unwritten"]
    assert first == [[0, 7], [0, 300_000]] and again == theirs == [[0, 0.0], [0, 300_000]]
    direct, wrapped = out["samples"]
    assert out["samples_fast"]
    assert 14 <= len(direct) <= 16 and direct == sorted(direct)  # 100 ms apart over the last 1.5 s
    assert all(ts % 100_000 == 0 and mw == 310_000 + ts // 100_000 % 7 * 100 for ts, mw in direct)
    common = min(direct[-1][0], wrapped[-1][0])  # a sample may have come between the two reads
    assert [s for s in direct if s[0] <= common] == [s for s in wrapped if s[0] <= common]
    assert out["none_newer"] == 6  # NVML_ERROR_NOT_FOUND: nothing newer, as pynvml raises it
    g = out["getters"]
    assert set(g) == {"temperature", "memory", "utilization", "sm_clock", "mem_clock", "power_limit",
                      "clocks_event_reasons", "throttle_reasons", "power_usage", "energy_counter"}
    assert not any(partial for _, _, partial in g.values())  # all called directly
    for name, (mine, theirs, _) in g.items():
        if name == "energy_counter":  # a counter: the second read is a moment later
            assert 0 <= theirs - mine < 300_000, (mine, theirs)
        else:
            assert mine == theirs, name
    assert g["temperature"][0] == 46 and g["sm_clock"][0] == 1980 and g["mem_clock"][0] == 2619
    assert g["memory"][0] == {"total": 81559 << 20, "free": 41559 << 20, "used": 40000 << 20}
    assert g["utilization"][0] == {"gpu": 90, "memory": 40} and g["power_limit"][0] == 700_000


GPU_BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "gpu")


@pytest.mark.parametrize("script, args, said", [
    ("nvml_direct.py", ["--calls", "2"], "\n0 disagreement(s)\n"),
    ("nvml_probe.py", ["--calls", "2"], ", values differing 0,"),
    ("startup_gpu.py", ["--runs", "1"], "daemon, real NVML"),
])
def test_the_gpu_benches_run_over_the_fake_library(libdir, tmp_path, script, args, said):
    """bench/gpu's scripts run only where a GPU is lent, rarely: over the fake library they must
    still run to the end and agree (the direct paths with pynvml's wrappers)."""
    proc = subprocess.run([sys.executable, os.path.join(GPU_BENCH, script), *args], cwd=str(tmp_path),
                          env=_env(libdir, 2), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and said in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def _xid_daemon(libdir, tmp_path, xids, samples=6):
    env = dict(_env(libdir, 2), FAKE_LIBNVML_XIDS=xids)
    proc = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.2", "--duration",
                           str(0.2 * samples), "--run-dir", str(tmp_path), "--host", "lib"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(str(tmp_path / "monitor" / "lib.gpu.csv"))[2]
    return rows, read_events(str(tmp_path / "monitor" / "lib.events.jsonl"))


def test_xids_through_the_real_binding_without_an_exception_a_sample(libdir, tmp_path):
    """The wait is pynvml's C function called directly (monitors/xid.py): its events reach the
    logs as through pynvml's wrapper -- GPU, XID, MIG instance, counts in the rows -- and an error
    of the wait stops the collection as before."""
    rows, events = _xid_daemon(libdir, tmp_path, "2:1:79,3:0:48:5,6:-1:999")
    xids = [e["detail"] for e in events if e["kind"] == "xid"]
    assert [(x["gpu_index"], x["xid"], x["xid_count"]) for x in xids] == [(1, 79, 1), (0, 48, 1)]
    assert xids[1]["gpu_instance_id"] == 5 and "gpu_instance_id" not in xids[0]
    assert xids[0]["uuid"] == "GPU-fa4e11b0-0000-4000-8000-000000000001"
    stop = [e["detail"] for e in events if e["kind"] == "source_unavailable"
            and e["detail"].get("capability") == "xid_events"]
    assert len(stop) == 1 and stop[0]["capability"] == "xid_events", stop
    assert "nvmlEventSetWait_v2 failed" in stop[0]["reason"] and "Unknown" in stop[0]["reason"], stop
    by_time = sorted({float(r["time_unix"]) for r in rows})
    counts = [[r["xid_count"] for r in rows if float(r["time_unix"]) == t] for t in by_time]
    # wait calls: 1 (sample 1), 2-4 (sample 2: two events), 5, then 6 (sample 4: the error); from it on: not collected (empty)
    assert counts[0] == ["0", "0"] and counts[1] == counts[2] == ["1", "1"], counts
    assert all(c == ["", ""] for c in counts[3:]) and len(counts) >= 5, counts


def test_xids_of_a_driver_with_only_the_legacy_wait(tmp_path):
    """A library without nvmlEventSetWait_v2 (a driver older than MIG): the legacy C function
    answers. pynvml's own legacy wrapper calls _v2 again, so through it the collection stopped."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-DFAKE_NO_WAIT_V2", "-shared", "-fPIC",
                    "-o", str(libdir / "libnvidia-ml.so.1"), SOURCE], check=True, capture_output=True, text=True)
    rows, events = _xid_daemon(libdir, tmp_path, "2:1:31")
    assert [(e["detail"]["gpu_index"], e["detail"]["xid"]) for e in events if e["kind"] == "xid"] == [(1, 31)]
    assert not [e for e in events if e["kind"] == "source_unavailable"
                and e["detail"].get("capability") == "xid_events"], events
    assert rows[-1]["xid_count"] == "1" and rows[-2]["xid_count"] == "0"
