"""NvmlSampler against the fake NVML (and the real binding's absent-library path)."""

import pytest

from hpclaunch.monitors import schema
from hpclaunch.monitors.nvml import NvmlSampler
from hpclaunch.monitors.ranks import gpu_rank_map

C = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}


def _sampler(fake, events, **kw):
    s = NvmlSampler(fake, "n1", events, **kw)
    assert s.start()
    return s


def _run(s, n, t0=1000.0, dt=1.0):
    return [s.sample(t0 + k * dt) for k in range(n)]


def test_rows_follow_the_schema(fake, events):
    s = _sampler(fake, events)
    rows = s.sample(1000.0)
    assert len(rows) == 2
    for r in rows:
        assert len(r) == len(schema.GPU_COLUMNS)
        assert r[C["host"]] == "n1"
        assert r[C["gpu_uuid"]].startswith("GPU-")
        assert r[C["error"]] is None
        assert r[C["power_w"]] > 50 and r[C["power_avg_w"]] > 50
        assert r[C["energy_mj"]] > 0
        assert r[C["slowdown_temp_c"]] == 89 and r[C["shutdown_temp_c"]] == 92
        assert r[C["power_limit_w"]] == 700.0
        assert r[C["mem_total_mib"]] == 81559
        assert r[C["ecc_dbe_total"]] == 0          # first row reads the slow path
    assert events.of("source_available")[0]["source"] == "nvml"


def test_thresholds_read_once_and_ecc_on_the_slow_path(fake, events):
    s = _sampler(fake, events, slow_every_s=30)
    rows = _run(s, 40)
    assert fake.CALLS["nvmlDeviceGetTemperatureThreshold"] == 4  # 2 GPUs x 2 thresholds, at start
    ecc = [r[0][C["ecc_dbe_total"]] for r in rows]
    assert [i for i, v in enumerate(ecc) if v is not None] == [0, 30]
    assert fake.CALLS["nvmlDeviceGetComputeRunningProcesses"] == 0
    assert fake.CALLS["nvmlDeviceGetFieldValues"] == 2 + 2 * 40  # probe + one batch per sample


def test_energy_counter_reset_is_an_event(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["series"]["energy_mj"] = [5000, 6000, 7000, 100, 200, 300]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 5)
    assert [r[0][C["energy_mj"]] for r in rows] == [6000, 7000, 100, 200, 300]
    resets = events.of("energy_counter_reset")
    assert len(resets) == 1
    assert resets[0]["gpu_index"] == 0 and resets[0]["previous_mj"] == 7000 and resets[0]["now_mj"] == 100


def test_gpu_lacking_energy_counter_says_so_and_leaves_the_cell_empty(fake, events):
    sc = fake.default_scenario()
    sc["devices"][1]["unsupported"] = ["energy_mj"]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 3)
    for r in rows:
        assert r[0][C["energy_mj"]] is not None
        assert r[1][C["energy_mj"]] is None       # empty, never 0
        assert r[1][C["error"]] is None           # the rest of the row is measured
        assert r[1][C["power_w"]] is not None
    said = [d for d in events.of("source_unavailable") if d.get("capability") == "energy_counter"]
    assert len(said) == 1 and said[0]["gpu_index"] == 1 and "Not Supported" in said[0]["reason"]


def test_one_gpu_raising_mid_run_gets_an_error_row_and_the_loop_goes_on(fake, events):
    sc = fake.default_scenario()
    lost = {"error": fake.NVML_ERROR_GPU_IS_LOST}
    sc["devices"][1]["series"]["temp_c"] = [40, 41, lost, lost, 42, 43]
    fake.configure(sc)
    s = _sampler(fake, events)
    rows = _run(s, 6)
    gpu1 = [r[1] for r in rows]
    assert [r[C["error"]] for r in gpu1[:2]] == [None, None]
    for r in gpu1[2:4]:
        assert r[C["error"]] == "NVMLError_GpuIsLost: GPU is lost"
        # xid_count comes from the event set, not from this GPU: still known in error rows
        measured = [r[C[c]] for c in schema.GPU_COLUMNS[5:] if c not in ("error", "xid_count")]
        assert measured == [None] * len(measured)
        assert r[C["xid_count"]] == 0
        assert r[C["gpu_uuid"]] and r[C["gpu_index"]] == 1
    assert gpu1[4][C["error"]] is None and gpu1[4][C["temp_c"]] == 42
    assert all(r[0][C["error"]] is None for r in rows)   # GPU 0 unaffected
    errs = events.of("nvml_error")
    assert len(errs) == 2                                # once when it broke, once recovered
    assert errs[0]["gpu_index"] == 1 and "GPU is lost" in errs[0]["error"]
    assert errs[1].get("recovered") is True


def test_not_supported_is_probed_once_then_skipped(fake, events):
    """GPU 0 lacks field 74 (so the power violation counter falls back to the function, which is
    not there either), the memory temperature and the instant power: each said once, then skipped."""
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = ["ce_sw_power_cap_ns", "mem_temp_c", "power_instant_mw"]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 5)
    before = fake.CALLS["nvmlDeviceGetViolationStatus"]
    s.sample(2000.0)
    assert fake.CALLS["nvmlDeviceGetViolationStatus"] - before == 0  # thermal is field 75 on both GPUs
    caps = sorted(d["capability"] for d in events.of("source_unavailable") if d.get("gpu_index") == 0)
    assert caps == ["clocks_event_counters", "mem_temp", "power_instant", "violation_power"]
    r = rows[-1][0]
    assert r[C["viol_power_ns"]] is None and r[C["viol_thermal_ns"]] == 0
    assert r[C["mem_temp_c"]] is None
    # without the instant field, power_w is nvmlDeviceGetPowerUsage and the average field stays
    assert r[C["power_w"]] is not None and r[C["power_avg_w"]] is not None


def test_violation_counters_are_the_batch_fields_and_the_function_only_without_them(fake, events):
    """Fields 74/75 are the power/thermal violation counters (one read for two columns); a driver
    that does not know the ids gets nvmlDeviceGetViolationStatus, as before."""
    sc = fake.default_scenario()
    for d in sc["devices"]:
        d["series"]["ce_sw_power_cap_ns"] = [0, 5, 9, 14]
        d["series"]["viol_thermal_ns"] = [0, 3, 4, 8]
    sc["devices"][1]["unknown_fields"] = [74, 75]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 3)
    g0, g1 = [r[0] for r in rows], [r[1] for r in rows]
    assert [r[C["viol_power_ns"]] for r in g0] == [5, 9, 14]              # the probe read the first
    assert [r[C["throttle_sw_power_cap_ns"]] for r in g0] == [5, 9, 14]   # the same read
    assert [r[C["viol_thermal_ns"]] for r in g0] == [3, 4, 8]
    assert [r[C["viol_power_ns"]] for r in g1] == [0, 5, 9]               # the function's own calls
    assert [r[C["viol_thermal_ns"]] for r in g1] == [0, 3, 4]
    assert fake.CALLS["nvmlDeviceGetViolationStatus"] == 2 * 3            # GPU 1 only


def test_costly_counters_are_read_every_counter_interval_and_when_asked(fake, events):
    """The energy counter and the hardware thermal / power-brake times (COUNTER_FIELDS) are read at
    the first sample, then every counter_every_s, and whenever sample(counters=True) asks (the
    daemon's last sample); the other fields every sample. A skipped counter's cell is empty."""
    from hpclaunch.monitors.nvml import COUNTER_FIELDS
    s = _sampler(fake, events, counter_every_s=3.0)
    rows = _run(s, 7)                                   # t = 1000 .. 1006
    rows.append(s.sample(1006.5, counters=True))
    read = [i for i, r in enumerate(rows) if r[0][C["energy_mj"]] is not None]
    assert read == [0, 3, 6, 7]
    for i, r in enumerate(rows):
        for col in ("throttle_hw_thermal_slowdown_ns", "throttle_hw_power_brake_slowdown_ns", "viol_thermal_ns"):
            assert (r[0][C[col]] is not None) == (i in read), (i, col)
        assert r[0][C["power_w"]] is not None and r[0][C["throttle_sw_power_cap_ns"]] is not None
    batches = [ids for gpu, ids in fake.FIELDS_ASKED[2:] if gpu == 0]
    assert [bool(COUNTER_FIELDS & set(ids)) for ids in batches] == [i in read for i in range(8)]
    energy = [r[0][C["energy_mj"]] for r in rows if r[0][C["energy_mj"]] is not None]
    assert energy == sorted(energy) and len(set(energy)) == 4       # consecutive reads of the counter


def test_field_values_missing_falls_back_to_single_calls(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = ["field_values"]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    r = _run(s, 2)[-1][0]
    assert r[C["power_w"]] is not None and r[C["energy_mj"]] is not None
    assert r[C["power_avg_w"]] is None and r[C["mem_temp_c"]] is None


def test_throttle_and_thermal_margin_events(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["series"]["clocks_event_reasons"] = [0, 0x1, 0x4, 0x4 | 0x20, 0x20, 0x0]
    sc["devices"][0]["series"]["temp_c"] = [70, 80, 85, 86, 83, 82, 86]
    fake.configure(sc)
    s = _sampler(fake, events, margin_c=5.0)
    _run(s, 7)
    th = [(k, d["reasons"]) for k, d in events.records if k.startswith("throttle_")]
    assert th == [("throttle_start", ["sw_power_cap"]), ("throttle_start", ["sw_thermal_slowdown"]),
                  ("throttle_stop", ["sw_power_cap"]), ("throttle_stop", ["sw_thermal_slowdown"])]
    low = events.of("thermal_margin_low")
    # 85 (margin 4) -> event; 83 (margin 6 >= 5+1) re-arms; 86 -> second event
    assert [d["temp_c"] for d in low] == [85, 86]
    assert low[0]["slowdown_temp_c"] == 89 and low[0]["threshold_c"] == 5.0


def test_clocks_event_reasons_falls_back_to_throttle_reasons(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = ["clocks_event_reasons_fn"]
    sc["devices"][0]["series"]["clocks_event_reasons"] = [0x4]
    fake.configure(sc)
    s = _sampler(fake, events)
    r = _run(s, 2)[-1][0]
    assert r[C["throttle_reasons"]] == 0x4
    # GPU 0 asked once (then skipped), GPU 1 twice
    assert fake.CALLS["nvmlDeviceGetCurrentClocksEventReasons"] == 3
    assert fake.CALLS["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_a_binding_without_the_clocks_event_function_uses_the_throttle_one(fake, events, monkeypatch):
    """nvidia-ml-py before 12.535 has no nvmlDeviceGetCurrentClocksEventReasons: said missing once per
    GPU, the older function's bitmask logged instead."""
    monkeypatch.delattr(fake, "nvmlDeviceGetCurrentClocksEventReasons")
    s = _sampler(fake, events)
    rows = _run(s, 3)
    assert all(r[C["throttle_reasons"]] is not None for sample in rows for r in sample)
    assert fake.CALLS["nvmlDeviceGetCurrentClocksThrottleReasons"] == 6  # 2 GPUs x 3 samples
    missing = [d for d in events.of("source_unavailable") if d.get("capability") == "clocks_event_reasons"]
    assert [d["gpu_index"] for d in missing] == [0, 1] and "not offered" in missing[0]["reason"]


def test_power_trace_drains_new_samples_only(fake, events, monkeypatch):
    s = _sampler(fake, events)
    t = [s.start_us / 1e6 + 1.0]
    monkeypatch.setattr(fake.time, "time", lambda: t[0])
    a = s.drain_power_samples()
    assert a and all(r[0] > s.start_us / 1e6 for r in a)
    assert {r[2] for r in a} == {0, 1}
    assert all(len(r) == len(schema.POWER_TRACE_COLUMNS) for r in a)
    t[0] += 0.5
    b = s.drain_power_samples()
    assert len(b) == 10                     # 5 new 100 ms samples x 2 GPUs
    assert min(r[0] for r in b) > max(r[0] for r in a)
    assert s.drain_power_samples() == []    # NOT_FOUND: nothing new


def test_power_trace_values_follow_their_value_type(fake, events, monkeypatch):
    """The value is read from the union member that the batch's nvmlValueType_t names (a double
    here); a type NVML has not defined gives no row rather than a wrong one."""
    s = _sampler(fake, events)
    t = [s.start_us / 1e6 + 1.0]
    monkeypatch.setattr(fake.time, "time", lambda: t[0])
    real = fake.nvmlDeviceGetSamples
    vtype = [fake.NVML_VALUE_TYPE_DOUBLE]

    def samples(device, kind, since):
        _, got = real(device, kind, since)
        for x in got:
            x.sampleValue = fake._Value(float(x.sampleValue.uiVal) + 0.5)  # dVal; uiVal is 0
        return vtype[0], got
    monkeypatch.setattr(fake, "nvmlDeviceGetSamples", samples)
    a = s.drain_power_samples()
    assert a and all(r[3] > 1 and abs(r[3] * 1000 % 1 - 0.5) < 1e-6 for r in a)  # W from mW + 0.5
    t[0] += 0.5
    vtype[0] = 99
    assert s.drain_power_samples() == []


def test_power_trace_unsupported_is_said_once(fake, events):
    sc = fake.default_scenario()
    for d in sc["devices"]:
        d["unsupported"] = ["power_samples"]
    fake.configure(sc)
    s = _sampler(fake, events)
    for _ in range(3):
        assert s.drain_power_samples() == []
    assert fake.CALLS["nvmlDeviceGetSamples"] == 2
    assert len([d for d in events.of("source_unavailable") if d.get("capability") == "power_samples"]) == 2


def test_library_missing_is_unavailable_with_reason(fake, events):
    fake.configure({"library_missing": True, "devices": []})
    s = NvmlSampler(fake, "n1", events)
    assert not s.start()
    assert events.of("source_unavailable") == [
        {"source": "nvml", "reason": "NVMLError_LibraryNotFound: NVML Shared Library Not Found"}]


def test_real_pynvml_on_this_machine_states_why(events):
    pynvml = pytest.importorskip("pynvml")
    s = NvmlSampler(pynvml, "n1", events)
    if s.start():  # a GPU node: sample for real
        rows = s.sample(1000.0)
        assert rows and all(len(r) == len(schema.GPU_COLUMNS) for r in rows)
        s.close()
    else:
        reason = events.of("source_unavailable")[0]["reason"]
        assert reason and "NVML" in reason


def test_rank_map_selects_the_jobs_gpus(fake, events):
    env = {"SLURM_JOB_GPUS": "1", "HPCLAUNCH_TASKS_PER_NODE": "2", "SLURM_NODEID": "3"}
    s = NvmlSampler(fake, "n1", events, rank_map=lambda devs: gpu_rank_map(devs, env))
    assert s.start()
    rows = s.sample(1.0)
    assert [(r[C["gpu_index"]], r[C["ranks"]]) for r in rows] == [(1, "6;7")]


REASON_COLS = tuple(schema.THROTTLE_COUNTER_COLUMNS.values())
REASON_IDS = (74, 76, 269, 270, 271)


def test_reason_counters_ride_in_the_existing_field_values_batch(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["series"].update({
        "ce_sw_power_cap_ns": [0, 0, 400_000_000, 900_000_000],
        "ce_hw_thermal_ns": [10, 20, 30, 40],
        "ce_hw_power_brake_ns": [2**40, 2**40 + 7]})
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 3)
    g0 = [r[0] for r in rows]
    assert [r[C["throttle_sw_power_cap_ns"]] for r in g0] == [0, 400_000_000, 900_000_000]
    assert [r[C["throttle_hw_thermal_slowdown_ns"]] for r in g0] == [20, 30, 40]
    assert [r[C["throttle_hw_power_brake_slowdown_ns"]] for r in g0] == [2**40 + 7] * 3  # 64-bit values kept
    assert all(r[1][C[c]] == 0 for r in rows for c in REASON_COLS)   # supported and zero: 0, not empty
    # no extra NVML call: the five ids are in the one batch per GPU per sample
    assert fake.CALLS["nvmlDeviceGetFieldValues"] == 2 + 2 * 3
    assert all(set(REASON_IDS) <= set(ids) for _, ids in fake.FIELDS_ASKED)
    assert not [d for d in events.of("source_unavailable") if d.get("capability") == "clocks_event_counters"]
    assert events.of("throttle_counter_reset") == []


def test_reason_counters_not_offered_stay_empty_and_are_said_once(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = ["ce_sw_power_cap_ns", "ce_sync_boost_ns", "ce_sw_thermal_ns",
                                       "ce_hw_thermal_ns", "ce_hw_power_brake_ns"]   # NOT_SUPPORTED
    sc["devices"][1]["unknown_fields"] = [269, 270, 271]   # a driver older than these ids
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 4)
    for r in rows:
        assert [r[0][C[c]] for c in REASON_COLS] == [None] * 5          # empty, never 0
        assert [r[1][C[c]] for c in REASON_COLS] == [0, 0, None, None, None]
        # field 74 is the power violation counter: not offered, and neither is the function (one
        # counter); the thermal one (field 75) is still read
        assert r[0][C["viol_power_ns"]] is None and r[0][C["viol_thermal_ns"]] == 0
        assert r[0][C["error"]] is None and r[0][C["power_w"]] is not None
    said = [d for d in events.of("source_unavailable") if d.get("capability") == "clocks_event_counters"]
    assert len(said) == 2
    by_gpu = {d["gpu_index"]: d for d in said}
    assert by_gpu[0]["counters"] == ["sw_power_cap", "sync_boost", "sw_thermal_slowdown",
                                     "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert "Not Supported" in by_gpu[0]["reason"] and "bitmask" in by_gpu[0]["reason"]
    assert by_gpu[1]["counters"] == ["sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert "Invalid Argument" in by_gpu[1]["reason"]
    # after the probe the batch no longer asks for what is not there
    asked = {i: ids for i, ids in fake.FIELDS_ASKED[2:]}
    assert not set(REASON_IDS) & set(asked[0])
    assert {74, 76} <= set(asked[1]) and not {269, 270, 271} & set(asked[1])


def test_reason_counters_without_field_values_say_why(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = ["field_values"]
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    r = _run(s, 2)[-1][0]
    assert [r[C[c]] for c in REASON_COLS] == [None] * 5
    said = [d for d in events.of("source_unavailable")
            if d.get("capability") == "clocks_event_counters" and d["gpu_index"] == 0]
    assert len(said) == 1 and "nvmlDeviceGetFieldValues" in said[0]["reason"]
    assert r[C["viol_power_ns"]] == 0


def test_throttle_counter_going_backwards_is_an_event_and_logged_as_read(fake, events):
    sc = fake.default_scenario()
    sc["devices"][0]["series"]["ce_sw_thermal_ns"] = [100, 200, 300, 50, 60]  # the probe reads the first
    sc["devices"][0]["series"]["viol_thermal_ns"] = [6_000, 7_000, 9_000, 10, 20]  # field 75, too
    fake.configure(sc)
    s = _sampler(fake, events, counter_every_s=0)
    rows = _run(s, 4)
    assert [r[0][C["throttle_sw_thermal_slowdown_ns"]] for r in rows] == [200, 300, 50, 60]
    assert [r[0][C["viol_thermal_ns"]] for r in rows] == [7_000, 9_000, 10, 20]
    resets = events.of("throttle_counter_reset")
    assert sorted((d["counter"], d["previous_ns"], d["now_ns"], d["gpu_index"]) for d in resets) == [
        ("throttle_sw_thermal_slowdown_ns", 300, 50, 0), ("viol_thermal_ns", 9_000, 10, 0)]
