"""XID errors through NVML's event API, against the fake NVML replaying XIDs at recorded times."""

import json
import os
import subprocess
import sys

import pytest

from hpclaunch.monitors import schema
from hpclaunch.monitors.nvml import NvmlSampler
from hpclaunch.monitors.ranks import gpu_rank_map
from hpclaunch.reports import build_report
from monitor_helpers import FAKE_PATH, read_csv, read_events

C = {c: i for i, c in enumerate(schema.GPU_COLUMNS)}
T0 = 1_800_000_000.0
# 4 ranks per node on node 1, 2 GPUs: local ranks 0,2 on GPU 0 and 1,3 on GPU 1 (global 4..7)
ENV = {"HPCLAUNCH_TASKS_PER_NODE": "4", "SLURM_NODEID": "1"}


@pytest.fixture
def clock(fake, monkeypatch):
    """One wall clock for the fake driver and the sampler, moved by the test."""
    t = [T0]
    monkeypatch.setattr(fake.time, "time", lambda: t[0])
    return t


def _sampler(fake, events, clock, env=ENV):
    s = NvmlSampler(fake, "n1", events, rank_map=lambda devs: gpu_rank_map(devs, env),
                    clock=lambda: clock[0], power_trace=False)
    assert s.start()
    return s


def _at(s, clock, *times):
    """Rows of samples taken ``times`` seconds after start."""
    out = []
    for dt in times:
        clock[0] = T0 + dt
        out.append(s.sample(clock[0]))
    return out


def _xid_unavailable(events):
    return [d for d in events.of("source_unavailable") if d.get("capability") == "xid_events"]


def test_each_xid_is_one_event_with_its_gpu_and_ranks_and_counts_in_the_rows(fake, events, clock):
    sc = fake.default_scenario()
    sc["devices"][0]["xids"] = [{"after_s": 1.5, "xid": 13}, {"after_s": 1.6, "xid": 13},
                                {"after_s": 3.2, "xid": 31}]
    sc["devices"][1]["xids"] = [{"after_s": 0.5, "xid": 79}]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    assert events.of("source_available")[-1]["xid_events"] == [0, 1]
    uuid_calls = fake.CALLS["nvmlDeviceGetUUID"]
    rows = _at(s, clock, 0, 1, 2, 3, 4, 5, 6)
    xids = events.of("xid")
    # each event's device is a new pointer object, as pynvml gives it: matched by the address it
    # holds, without asking NVML again
    assert fake.CALLS["nvmlDeviceGetUUID"] == uuid_calls
    assert [(d["gpu_index"], d["xid"], d["xid_count"]) for d in xids] == [
        (1, 79, 1), (0, 13, 1), (0, 13, 2), (0, 31, 3)]          # each once, in time order
    uuids = [r[C["gpu_uuid"]] for r in rows[0]]
    assert [d["uuid"] for d in xids] == [uuids[1], uuids[0], uuids[0], uuids[0]]
    assert [d["ranks"] for d in xids] == ["5;7", "4;6", "4;6", "4;6"]   # as in the rows' ranks column
    assert [r[C["ranks"]] for r in rows[0]] == ["4;6", "5;7"]
    # the sample that saw it, and the previous poll: the XID happened in between
    assert list(zip([d["since_unix"] for d in xids], events.times_of("xid"))) == [
        (T0, T0 + 1), (T0 + 1, T0 + 2), (T0 + 1, T0 + 2), (T0 + 3, T0 + 4)]
    assert [[r[C["xid_count"]] for r in rs] for rs in rows] == [
        [0, 0], [0, 1], [2, 1], [2, 1], [3, 1], [3, 1], [3, 1]]


def test_a_mig_instance_xid_names_its_instance(fake, events, clock):
    sc = fake.default_scenario()
    sc["devices"][0]["xids"] = [{"after_s": 0.5, "xid": 43, "gpu_instance_id": 2, "compute_instance_id": 0},
                                {"after_s": 0.6, "xid": 79}]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    _at(s, clock, 0, 1)
    first, second = events.of("xid")
    assert (first["xid"], first["gpu_instance_id"], first["compute_instance_id"]) == (43, 2, 0)
    assert second["xid"] == 79 and "gpu_instance_id" not in second and "compute_instance_id" not in second


def test_one_non_blocking_wait_per_sample_not_per_gpu(fake, events, clock):
    sc = fake.default_scenario()
    sc["devices"] = [fake._h100(f"GPU-{i:08d}-0000-4000-8000-000000000000", i) for i in range(8)]
    sc["devices"][5]["xids"] = [{"after_s": 2.5, "xid": 94}]
    fake.configure(sc)
    s = _sampler(fake, events, clock, env={"HPCLAUNCH_TASKS_PER_NODE": "8"})
    _at(s, clock, *range(10))
    # 10 samples answered TIMEOUT once each, plus one call that delivered the XID
    assert fake.CALLS["nvmlEventSetWait_v2"] == 10 + 1
    assert fake.CALLS["nvmlEventSetWait"] == 0
    assert fake.CALLS["nvmlDeviceRegisterEvents"] == 8
    assert [(d["gpu_index"], d["ranks"]) for d in events.of("xid")] == [(5, "5")]


def test_an_xid_storm_is_drained_in_bounded_steps_and_nothing_is_lost(fake, events, clock):
    from hpclaunch.monitors.xid import MAX_PER_POLL
    sc = fake.default_scenario()
    sc["devices"][1]["xids"] = [{"after_s": 0.5, "xid": 13}] * (MAX_PER_POLL + 44)
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 1, 2, 3)
    assert [rs[1][C["xid_count"]] for rs in rows] == [MAX_PER_POLL, MAX_PER_POLL + 44, MAX_PER_POLL + 44]
    assert len(events.of("xid")) == MAX_PER_POLL + 44
    assert _xid_unavailable(events) == []


def test_gpu_without_xid_events_is_said_once_and_its_count_stays_empty(fake, events, clock):
    sc = fake.default_scenario()
    sc["devices"][0]["xids"] = [{"after_s": 0.5, "xid": 48}]
    sc["devices"][1]["event_types"] = 0x1 | 0x2          # ECC events only, no XIDs
    sc["devices"][1]["xids"] = [{"after_s": 0.5, "xid": 79}]   # raised, but never registered
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2, 3)
    said = _xid_unavailable(events)
    assert len(said) == 1 and said[0]["gpu_index"] == 1 and "0x3" in said[0]["reason"]
    assert events.of("source_available")[-1]["xid_events"] == [0]
    assert [(d["gpu_index"], d["xid"]) for d in events.of("xid")] == [(0, 48)]
    for rs in rows:
        assert rs[1][C["xid_count"]] is None             # not collected: empty, never 0
        assert rs[1][C["power_w"]] is not None and rs[1][C["error"]] is None
    assert [rs[0][C["xid_count"]] for rs in rows] == [0, 1, 1, 1]


@pytest.mark.parametrize("call,key", [("nvmlDeviceGetSupportedEventTypes", "event_types"),
                                      ("nvmlDeviceRegisterEvents", "register_events")])
def test_event_calls_not_supported_for_a_gpu_are_said_once(fake, events, clock, call, key):
    sc = fake.default_scenario()
    sc["devices"][0]["unsupported"] = [key]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2)
    said = _xid_unavailable(events)
    assert [(d["gpu_index"], d["reason"]) for d in said] == [(0, f"{call}: NVMLError_NotSupported: Not Supported")]
    assert [[r[C["xid_count"]] for r in rs] for rs in rows] == [[None, 0]] * 3


@pytest.mark.parametrize("how", ["driver", "binding"])
def test_no_event_api_is_said_once_and_sampling_goes_on(fake, events, clock, monkeypatch, how):
    sc = fake.default_scenario()
    sc["devices"][0]["xids"] = [{"after_s": 0.5, "xid": 79}]
    if how == "driver":  # an old driver: pynvml finds no nvmlEventSetCreate in the library
        sc["missing_functions"] = ["nvmlEventSetCreate"]
    else:                # an old binding without the event API at all
        monkeypatch.delattr(fake, "nvmlEventSetCreate")
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2, 3)
    said = _xid_unavailable(events)
    assert len(said) == 1 and "gpu_index" not in said[0]
    assert ("Function Not Found" if how == "driver" else "no event API") in said[0]["reason"]
    assert events.of("xid") == [] and events.of("source_available")[-1]["xid_events"] == []
    assert fake.CALLS["nvmlEventSetWait_v2"] == 0
    for rs in rows:
        assert [r[C["xid_count"]] for r in rs] == [None, None]
        assert all(r[C["power_w"]] is not None and r[C["error"]] is None for r in rs)


def test_wait_v2_missing_falls_back_to_the_legacy_wait(fake, events, clock):
    sc = fake.default_scenario()
    sc["missing_functions"] = ["nvmlEventSetWait_v2"]
    sc["devices"][1]["xids"] = [{"after_s": 1.5, "xid": 43}]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2, 3)
    assert [(d["gpu_index"], d["xid"]) for d in events.of("xid")] == [(1, 43)]
    assert fake.CALLS["nvmlEventSetWait_v2"] == 1        # tried once, then the legacy name
    assert fake.CALLS["nvmlEventSetWait"] == 4 + 1
    assert _xid_unavailable(events) == []
    assert rows[-1][1][C["xid_count"]] == 1


def test_neither_wait_function_is_said_once_then_never_asked_again(fake, events, clock):
    sc = fake.default_scenario()
    sc["missing_functions"] = ["nvmlEventSetWait_v2", "nvmlEventSetWait"]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2)
    said = _xid_unavailable(events)
    assert len(said) == 1 and "Function Not Found" in said[0]["reason"]
    assert fake.CALLS["nvmlEventSetWait_v2"] + fake.CALLS["nvmlEventSetWait"] == 2
    assert fake.CALLS["nvmlEventSetFree"] == 1
    assert [[r[C["xid_count"]] for r in rs] for rs in rows] == [[None, None]] * 3


@pytest.mark.parametrize("code", [15, 999])  # GPU_IS_LOST, UNKNOWN
def test_event_set_error_mid_run_stops_collection_once_and_sampling_goes_on(fake, events, clock, code):
    sc = fake.default_scenario()
    sc["devices"][0]["xids"] = [{"after_s": 0.5, "xid": 79}, {"after_s": 4.5, "xid": 79}]
    sc["event_wait_errors"] = [{"after_s": 2.5, "error": code}]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1, 2, 3, 4, 5, 6)
    assert [(d["gpu_index"], d["xid"]) for d in events.of("xid")] == [(0, 79)]   # the one before
    said = _xid_unavailable(events)
    assert len(said) == 1 and "gpu_index" not in said[0]
    assert "nvmlEventSetWait_v2 failed" in said[0]["reason"] and "stopped" in said[0]["reason"]
    assert fake.CALLS["nvmlEventSetFree"] == 1
    waits = fake.CALLS["nvmlEventSetWait_v2"]
    _at(s, clock, 7, 8)
    assert fake.CALLS["nvmlEventSetWait_v2"] == waits    # not asked again before a new set is tried
    # counted up to the error; empty from then on (XIDs may have been missed)
    assert [rs[0][C["xid_count"]] for rs in rows] == [0, 1, 1, None, None, None, None]
    assert all(r[C["power_w"]] is not None and r[C["error"]] is None for rs in rows for r in rs)
    s.close()
    assert fake.CALLS["nvmlEventSetFree"] == 1           # freed once only


def test_a_new_set_resumes_collection_and_the_counts_go_on(fake, events, clock):
    from hpclaunch.monitors.xid import RETRY_FIRST_S
    sc = fake.default_scenario()
    # 79 before the error at 2.5 s, 48 in the gap (lost, as NVML loses it), 31 after the new set
    sc["devices"][0]["xids"] = [{"after_s": 0.5, "xid": 79}, {"after_s": 4.5, "xid": 48},
                                {"after_s": RETRY_FIRST_S + 10.5, "xid": 31}]
    sc["event_wait_errors"] = [{"after_s": 2.5, "error": 999}]
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    times = (0, 1, 3, RETRY_FIRST_S + 2, RETRY_FIRST_S + 3, RETRY_FIRST_S + 11)
    rows = _at(s, clock, *times)
    assert [d["xid"] for d in events.of("xid")] == [79, 31]
    assert [d["xid_count"] for d in events.of("xid")] == [1, 2]
    assert [[r[C["xid_count"]] for r in rs] for rs in rows] == [[0, 0], [1, 0], [None, None], [None, None],
                                                                [1, 0], [2, 0]]
    resumed = [d for d in events.of("source_available") if d.get("capability") == "xid_events"]
    assert resumed == [{"source": "nvml", "capability": "xid_events", "xid_events": [0, 1],
                        "resumed_after_s": RETRY_FIRST_S, "stopped_unix": T0 + 3}]
    assert len(_xid_unavailable(events)) == 1 and fake.CALLS["nvmlEventSetCreate"] == 2
    s.close()
    assert fake.CALLS["nvmlEventSetFree"] == 2


def test_a_failing_new_set_is_retried_at_doubling_intervals_and_said_once(fake, events, clock, monkeypatch):
    from hpclaunch.monitors.xid import RETRY_FIRST_S, RETRY_MAX_S
    sc = fake.default_scenario()
    sc["event_wait_errors"] = [{"after_s": 0.5, "error": 15}]   # GPU_IS_LOST
    fake.configure(sc)
    s = _sampler(fake, events, clock)
    _at(s, clock, 0, 1)                                          # stops at 1
    monkeypatch.setattr(fake, "nvmlEventSetCreate", lambda: (_ for _ in ()).throw(fake.NVMLError(15)))
    tries = []
    real = s.xid._open
    monkeypatch.setattr(s.xid, "_open", lambda now, say: (tries.append(now - T0), real(now, say))[1])
    _at(s, clock, *range(2, 2000, 1))
    # 30, 60, 120, 240, 480 s apart, then RETRY_MAX_S (600 s)
    assert RETRY_FIRST_S * 32 > RETRY_MAX_S > RETRY_FIRST_S * 16
    assert tries == [1 + RETRY_FIRST_S * k for k in (1, 3, 7, 15, 31)] + [1 + RETRY_FIRST_S * 31 + RETRY_MAX_S]
    assert len(_xid_unavailable(events)) == 1                    # the stop; no record per failed try
    assert not [d for d in events.of("source_available") if d.get("capability") == "xid_events"]


def test_register_unknown_error_frees_the_undefined_set(fake, events, clock, monkeypatch):
    real = fake.nvmlDeviceRegisterEvents

    def register(handle, types, eventSet):
        if handle.index == 1:
            raise fake.NVMLError(fake.NVML_ERROR_UNKNOWN)
        return real(handle, types, eventSet)
    monkeypatch.setattr(fake, "nvmlDeviceRegisterEvents", register)
    s = _sampler(fake, events, clock)
    rows = _at(s, clock, 0, 1)
    said = _xid_unavailable(events)
    assert len(said) == 1 and "gpu_index" not in said[0] and "Unknown Error" in said[0]["reason"]
    assert fake.CALLS["nvmlEventSetFree"] == 1 and fake.CALLS["nvmlEventSetWait_v2"] == 0
    assert [[r[C["xid_count"]] for r in rs] for rs in rows] == [[None, None]] * 2


def test_close_frees_the_event_set_before_nvml_shutdown(fake, events, clock, monkeypatch):
    s = _sampler(fake, events, clock)
    _at(s, clock, 0)
    es = s.xid.set
    real = fake.nvmlShutdown
    seen = []
    monkeypatch.setattr(fake, "nvmlShutdown", lambda: (seen.append(es.freed), real()))
    s.close()
    assert seen == [True] and fake.CALLS["nvmlEventSetFree"] == 1


def test_daemon_logs_xids_and_the_report_lists_them(tmp_path):
    """End to end: the daemon subprocess on the fake, its files, then the report."""
    sc = {"driver": "550.54.15", "devices": [
        {"uuid": "GPU-aaaa", "series": _flat_series()},
        {"uuid": "GPU-bbbb", "series": _flat_series(), "xids": [{"after_s": 0.3, "xid": 79},
                                                                 {"after_s": 0.35, "xid": 79}]}]}
    (tmp_path / "scenario.json").write_text(json.dumps(sc))
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID")}
    env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH, "HPCLAUNCH_TASKS_PER_NODE": "2",
                "HPCLAUNCH_FAKE_NVML_SCENARIO": str(tmp_path / "scenario.json")})
    run = tmp_path / "job-42"
    p = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--interval", "0.1", "--duration", "1.2",
                        "--run-dir", str(run), "--host", "n7", "--no-power-trace"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    mon = run / schema.MONITOR_DIR
    ev = read_events(mon / schema.events_file("n7"))
    assert {e["kind"] for e in ev} <= set(schema.EVENT_KINDS)
    xids = [e for e in ev if e["kind"] == "xid"]
    assert [(e["detail"]["gpu_index"], e["detail"]["uuid"], e["detail"]["ranks"], e["detail"]["xid"])
            for e in xids] == [(1, "GPU-bbbb", "1", 79)] * 2
    assert ev[-1]["kind"] == "stopped"
    _, header, rows = read_csv(mon / schema.gpu_file("n7"))
    assert tuple(header) == schema.GPU_COLUMNS
    g1 = [int(r["xid_count"]) for r in rows if r["gpu_index"] == "1"]
    assert g1[0] == 0 and g1[-1] == 2 and g1 == sorted(g1)
    assert {r["xid_count"] for r in rows if r["gpu_index"] == "0"} == {"0"}
    rep = build_report(run)
    by = {g["index"]: g for g in rep.data["gpus"]}
    assert by[0]["xids"] == []
    (x,) = by[1]["xids"]
    assert (x["xid"], x["count"]) == (79, 2) and x["first_unix"] == xids[0]["time_unix"]
    assert by[1]["ranks"] == [1]


def _flat_series():
    return {"power_instant_mw": [90000], "power_average_mw": [88000], "power_usage_mw": [88000],
            "energy_mj": [1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000, 12000, 13000,
                          14000, 15000],
            "mem_temp_c": [40], "temp_c": [50], "mem_used_mib": [100], "mem_total_mib": [81559],
            "util_gpu": [50], "util_mem": [10], "sm_clock": [1980], "mem_clock": [2619],
            "power_limit_mw": [700000], "clocks_event_reasons": [0], "viol_power_ns": [0],
            "viol_thermal_ns": [0], "ecc_dbe": [0], "slowdown_c": [89], "shutdown_c": [92]}
