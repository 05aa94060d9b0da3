"""The fleet ledger (issue 17): `report --since` reads each ended job's summary from the registry,
with the same totals as the log-based path; a job whose logs change is summarised again; a job
still running is not ledgered."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.reports.fleet import build_fleet_report, render_fleet  # noqa: E402
from hpclaunch.reports import fleet as fleet_mod  # noqa: E402
from hpclaunch.runs import ledger  # noqa: E402
from hpclaunch.runs.registry import Registry  # noqa: E402


@pytest.fixture(autouse=True, params=["orjson", "json"])
def codec(request, monkeypatch):
    """Every test with the report extra's orjson and with the json module alone: same answers."""
    if request.param == "json":
        monkeypatch.setattr(fleet_mod, "_orjson", None)
    else:
        assert fleet_mod._orjson is not None, "orjson is missing: the report extra installs it (make venv)"
    return request.param


def test_a_large_fleets_json_is_the_same_through_either_codec(monkeypatch):
    data = {"jobs_count": 1000, "energy_j": 1.5e9, "jobs": [{"id": str(i), "energy_j": 0.1 * i, "max_temp_c": None}
                                                           for i in range(1000)],
            "hottest": [{"t": float("nan")}, {"t": float("inf")}], "big": 2 ** 70, "warnings": ["ü \"q\""]}
    import orjson   # whichever codec the autouse fixture chose: this test compares the two itself
    monkeypatch.setattr(fleet_mod, "_orjson", orjson)
    fast = json.loads(render_fleet(fleet_mod.FleetReport(data=data), "json"))
    monkeypatch.setattr(fleet_mod, "_orjson", None)
    plain = json.loads(render_fleet(fleet_mod.FleetReport(data=data), "json"))
    assert fast == plain and plain["hottest"] == [{"t": None}, {"t": None}] and plain["big"] == 2 ** 70


def _job(tmp_path, reg, k, state="COMPLETED"):
    rd = tmp_path / f"job-{k}"
    specs = [GpuSpec(h, i, a=200 + 10 * i + k, b=50, phase=0.3 * i, ranks=str(i), throttle_window=(100, 130))
             for h in ("n1", "n2") for i in range(2)]
    write_run(rd, specs, hosts=[HostSpec("n1"), HostSpec("n2")], duration=300, jitter=0.2, metrics=None)
    rec = reg.add(backend="slurm", cluster="c", job_id=str(100 + k), name=f"job{k}", run_dir=str(rd),
                  partition="gpu")
    if state != "PENDING":
        reg.update_state(rec.key, state, exit_code=0)
    return rec


def _plain_rows(reg):
    return [{"id": r.job_id, "name": r.name, "user": r.user, "partition": r.partition or "",
             "run_dir": r.run_dir, "submit_time": r.submit_time} for r in reg.list()]


def _same(a, b):
    return json.loads(render_fleet(a, "json")) == json.loads(render_fleet(b, "json"))


def test_ledger_gives_the_log_based_totals_and_is_read_not_rebuilt(hpc_home, tmp_path, monkeypatch):
    reg = Registry()
    for k in range(3):
        _job(tmp_path, reg, k)
    from_logs = build_fleet_report(_plain_rows(reg))
    first = build_fleet_report(ledger.fleet_rows(reg))
    assert _same(first, from_logs)
    assert len(reg.ledger([r.key for r in reg.list()])) == 3
    # the second view reads the ledger only: summarising would fail now
    monkeypatch.setattr(ledger, "job_summary", lambda *a, **k: pytest.fail("re-summarised an unchanged job"))
    monkeypatch.setattr(fleet_mod, "job_summary", lambda *a, **k: pytest.fail("read the logs"))
    second = build_fleet_report(ledger.fleet_rows(reg))
    assert _same(second, from_logs)
    assert second.data["energy_j"] == pytest.approx(from_logs.data["energy_j"], rel=0, abs=1e-6)


def test_changed_logs_are_summarised_again_and_running_jobs_never_ledgered(hpc_home, tmp_path):
    reg = Registry()
    done = _job(tmp_path, reg, 0)
    running = _job(tmp_path, reg, 1, state="PENDING")
    ledger.fleet_rows(reg)
    assert set(reg.ledger([done.key, running.key])) == {done.key}
    before = json.loads(reg.ledger([done.key])[done.key][1])[1]   # [format, energy total J, ...]
    # the job's GPU log gains a later row (a straggling monitor flush): its summary is made again
    gpu_csv = next(p for p in (tmp_path / "job-0" / "monitor").iterdir() if "gpu" in p.name)
    lines = [line for line in gpu_csv.read_text().splitlines() if not line.startswith("#")]
    header, last = lines[0].split(","), lines[-1].split(",")
    t = header.index("time_unix")
    last[t] = f"{float(last[t]) + 1.0:.3f}"
    energy = [i for i, name in enumerate(header) if name.startswith("energy")]
    for i in energy:
        if last[i]:
            last[i] = str(int(float(last[i]) + 300_000))  # +300 J over that second
    with open(gpu_csv, "a") as f:
        f.write(",".join(last) + "\n")
    os.utime(gpu_csv, ns=(0, os.stat(gpu_csv).st_mtime_ns + 10**9))
    ledger.fleet_rows(reg)
    after = json.loads(reg.ledger([done.key])[done.key][1])[1]
    assert after > before


def test_report_since_cli_uses_the_ledger(hpc_home, tmp_path):
    from hlcli import hl
    reg = Registry()
    for k in range(2):
        _job(tmp_path, reg, k)
    reg.close()
    out = json.loads(hl("report", "--since", "1d", "--format", "json", cwd="/").stdout)
    assert out["jobs_count"] == 2
    reg = Registry()
    assert len(reg.ledger([r.key for r in reg.list()])) == 2


def test_settled_jobs_are_trusted_unless_refreshed(hpc_home, tmp_path, monkeypatch):
    reg = Registry()
    rec = _job(tmp_path, reg, 0)
    ledger.fleet_rows(reg)
    reg._db.execute("UPDATE jobs SET end_time = end_time - 2 * 86400")  # ended two days ago
    calls = []
    monkeypatch.setattr(ledger, "logs_signature", lambda rd: calls.append(rd) or "changed")
    made = [fleet_mod.SUMMARY_FORMAT, 1.0, None, None, False, 1.0, None, {}, [], [], 0]
    monkeypatch.setattr(ledger, "job_summary", lambda rd: made)
    ledger.fleet_rows(reg)
    assert calls == []
    ledger.fleet_rows(reg, refresh=True)
    assert calls == [rec.run_dir]
    assert json.loads(reg.ledger([rec.key])[rec.key][1]) == made


def test_damaged_or_old_ledger_entries_are_made_again_from_the_logs(hpc_home, tmp_path):
    reg = Registry()
    recs = [_job(tmp_path, reg, k) for k in range(3)]
    from_logs = build_fleet_report(_plain_rows(reg))
    ledger.fleet_rows(reg)
    good = reg.ledger([recs[2].key])[recs[2].key]
    # a hand edit that is not JSON, a summary of another format, and a NaN (never written: allow_nan=False)
    reg.put_ledger([(recs[0].key, good[0], "{not json"), (recs[1].key, good[0], '[99, 1.0]'),
                    (recs[2].key, good[0], good[1].replace(str(json.loads(good[1])[1]), "NaN", 1))])
    again = build_fleet_report(ledger.fleet_rows(reg))
    assert _same(again, from_logs) and not again.warnings
    assert all(json.loads(e[1])[0] == fleet_mod.SUMMARY_FORMAT
               for e in reg.ledger([r.key for r in recs]).values())


def test_slurm_comment_line_is_compact_json_of_the_report(tmp_path):
    from hpclaunch.reports import build_report
    from hpclaunch.reports.slurm_comment import comment, main
    rd = tmp_path / "run"
    write_run(rd, [GpuSpec("n1", i, ranks=str(i)) for i in range(2)], hosts=[HostSpec("n1")], duration=120,
              jitter=0.2, metrics=None)
    line = comment(str(rd))
    assert " " not in line and "|" not in line   # one sacct field, whatever the delimiter
    data = json.loads(line)
    total = build_report(str(rd)).data["energy_j"]["total"]
    assert data["energy_j"] == pytest.approx(total, abs=0.1) and data["gpus"] == 2
    empty = tmp_path / "empty"
    (empty / "monitor").mkdir(parents=True)
    assert main([str(empty)]) == 1


def test_hand_edited_registry_rows_are_read_defensively(hpc_home, tmp_path):
    reg = Registry()
    a, b = _job(tmp_path, reg, 0), _job(tmp_path, reg, 1)
    reg._db.execute("UPDATE jobs SET partition = 7, job_id = 1234, name = 4.5 WHERE key = ?", (a.key,))
    rows = {r[0]: r for r in reg.fleet()}
    assert (rows[a.key][1], rows[a.key][2], rows[a.key][4]) == ("1234", "4.5", "7")
    assert type(rows[b.key][6]) is float and rows[b.key][4] == "gpu"
    fleet = build_fleet_report(ledger.fleet_rows(reg))
    assert {j["partition"] for j in fleet.data["jobs"]} == {"7", "gpu"}


def test_a_ledger_summary_with_absurd_numbers_is_refused_and_the_fleet_view_still_answers(hpc_home, tmp_path):
    """Issue 44, item 9: one summary with huge finite numbers (valid JSON: 1e308) made every
    `report --since` fail (OverflowError in fsum over a GPU slot's temperatures); an older hpclaunch's
    summary of rows it now drops (5.9e28 J) would have been summed as it was. Such an entry is
    refused, that job read from its logs with a warning, and the view is the logs' own."""
    from hlcli import hl
    reg = Registry()
    recs = [_job(tmp_path, reg, k) for k in range(3)]
    from_logs = build_fleet_report(_plain_rows(reg))
    ledger.fleet_rows(reg)
    entries = reg.ledger([r.key for r in recs])
    edits = []
    for rec, edit in zip(recs, ("temp", "temp", "energy")):
        sig, text = entries[rec.key]
        summary = json.loads(text)
        if edit == "temp":
            summary[8][0][3] = 1e308          # the same GPU slot in two jobs: their mean overflows
        else:
            summary[1] = 5.9e28
        edits.append((rec.key, sig, json.dumps(summary, allow_nan=False)))
    reg.put_ledger(edits)
    reg.close()
    for fmt in ("json", "text", "html"):
        proc = hl("report", "--since", "1d", "--format", fmt, cwd="/", check=False)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    out = json.loads(hl("report", "--since", "1d", "--format", "json", cwd="/").stdout)
    assert out["jobs_count"] == 3 and out["energy_j"] == pytest.approx(from_logs.data["energy_j"])
    refused = [w for w in out["warnings"] if "its ledger summary was refused" in w]
    assert len(refused) == 3 and "beyond any job's value" in refused[0], out["warnings"]
    again = build_fleet_report(ledger.fleet_rows(Registry()))
    assert again.data["gpu_slots"] == from_logs.data["gpu_slots"]
