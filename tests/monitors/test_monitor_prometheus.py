"""The monitor as a Prometheus exporter (monitors/prometheus.py), end to end and real: the daemon as a
subprocess with the fake NVML, scraped over HTTP and parsed with prometheus_client's own parser; its
textfile checked by promtool; and a real Prometheus server scraping the monitor of a local-backend job.
"""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import fake_nvml
from hlcli import hl
from hpclaunch.monitors import schema
from monitor_helpers import FAKE_PATH, PrometheusServer, free_ports, read_csv, read_events, wait_for

HOST = "node7"
JOB_NAME = 'digits "ddp", v2'   # a quote and a comma: label values are escaped, CSV cells are not
MIB = 1048576.0

# The public names, written out here (not taken from the module): renaming one fails this test.
GPU_EXPECTED = {
    "hpclaunch_gpu_energy_joules_total": ("energy_mj", 1e-3),
    "hpclaunch_gpu_power_watts": ("power_w", 1.0),
    "hpclaunch_gpu_power_limit_watts": ("power_limit_w", 1.0),
    "hpclaunch_gpu_temperature_celsius": ("temp_c", 1.0),
    "hpclaunch_gpu_memory_temperature_celsius": ("mem_temp_c", 1.0),
    "hpclaunch_gpu_memory_used_bytes": ("mem_used_mib", MIB),
    "hpclaunch_gpu_memory_total_bytes": ("mem_total_mib", MIB),
    "hpclaunch_gpu_utilization_ratio": ("util_pct", 0.01),
    "hpclaunch_gpu_sm_clock_hertz": ("sm_clock_mhz", 1e6),
    "hpclaunch_gpu_xid_errors_total": ("xid_count", 1.0),
    "hpclaunch_gpu_slowdown_temperature_celsius": ("slowdown_temp_c", 1.0),
}
HOST_EXPECTED = {
    "hpclaunch_host_cpu_utilization_ratio": ("cpu_pct", 0.01),
    "hpclaunch_host_memory_used_bytes": ("mem_used_mib", MIB),
    "hpclaunch_host_memory_total_bytes": ("mem_total_mib", MIB),
    "hpclaunch_host_load1": ("load1", 1.0),
}
THROTTLE_REASONS = {"sw_power_cap": "throttle_sw_power_cap_ns", "sync_boost": "throttle_sync_boost_ns",
                    "sw_thermal_slowdown": "throttle_sw_thermal_slowdown_ns",
                    "hw_thermal_slowdown": "throttle_hw_thermal_slowdown_ns",
                    "hw_power_brake_slowdown": "throttle_hw_power_brake_slowdown_ns"}


@pytest.fixture(autouse=True)
def _needs_prometheus_client(require):
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        require("prometheus_client is not installed (pip install '.[monitor]', make venv)",
                "tests/monitors/test_monitor_prometheus.py")


def scenario():
    """Two H100s as the default scenario, as JSON (lists, not functions), with throttle time and an XID."""
    devices = []
    for d in fake_nvml.default_scenario()["devices"]:
        series = {k: ([v(i) for i in range(600)] if callable(v) else v) for k, v in d["series"].items()}
        series["ce_sw_power_cap_ns"] = [i * 37_000_000 for i in range(600)]
        series["ce_hw_thermal_ns"] = [i * 1_500_000 for i in range(600)]
        devices.append({"uuid": d["uuid"], "series": series, "unsupported": []})
    devices[1]["xids"] = [{"after_s": 0.2, "xid": 31}]
    return {"driver": "550.54.15", "devices": devices}


def start(run_dir, *extra, env_extra=None, interval=0.1, umask=None):
    p = os.path.join(str(run_dir), "scenario.json")
    with open(p, "w") as f:
        json.dump(scenario(), f)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID",
                        "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")}
    env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE_PATH, "HPCLAUNCH_FAKE_NVML_SCENARIO": p,
                "HPCLAUNCH_TASKS_PER_NODE": "2", "PYTHONUNBUFFERED": "1", "SLURM_JOB_ID": "4242",
                "HPCLAUNCH_JOB_NAME": JOB_NAME, "SLURM_JOB_USER": "alice"})
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", str(interval), "--run-dir", str(run_dir),
           "--host", HOST, *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def mon(run_dir, name):
    return os.path.join(str(run_dir), schema.MONITOR_DIR, name)


def rows_of(path):
    return read_csv(path)[2] if os.path.exists(path) else []


def stop(p):
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=15)
    assert p.returncode == 0, err
    return err


def parse(text):
    """{sample name: [(labels, value)]} through prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def close_to(got, cell, factor):
    """The metric (in its unit) against the CSV cell (3 decimals, in the column's unit)."""
    want = float(cell)
    return abs(got / factor - want) <= 0.0005 + 1e-9 * abs(want)


HELD = ("energy_mj", "throttle_hw_thermal_slowdown_ns", "throttle_hw_power_brake_slowdown_ns")


def assert_matches_csv(series, run_dir):
    """Every series is the CSV row of the sample it names (hpclaunch_monitor_last_sample_timestamp_seconds)."""
    [(labels, ts)] = series["hpclaunch_monitor_last_sample_timestamp_seconds"]
    job = {"job_id": "4242", "job_name": JOB_NAME, "user": "alice", "node": HOST}
    assert labels == job
    hosts = [r for r in rows_of(mon(run_dir, schema.host_file(HOST))) if abs(float(r["time_unix"]) - ts) < 6e-4]
    gpus = [r for r in rows_of(mon(run_dir, schema.gpu_file(HOST))) if abs(float(r["time_unix"]) - ts) < 6e-4]
    assert len(hosts) == 1 and len(gpus) == 2, (ts, hosts, gpus)
    host = hosts[0]
    [(_, samples)] = series["hpclaunch_monitor_samples_total"]
    assert samples >= 3
    for name, (col, factor) in HOST_EXPECTED.items():
        [(labels, value)] = series[name]
        assert labels == job and host[col] != "" and close_to(value, host[col], factor), (name, value, host[col])
    # empty cells (no RAPL, no CPU sensor on this machine) are no series at all, never 0
    assert host["rapl_energy_uj"] == "" and "hpclaunch_host_rapl_energy_joules_total" not in series
    assert host["cpu_temp_c"] == "" and "hpclaunch_host_cpu_temperature_celsius" not in series
    by_gpu = {r["gpu_index"]: r for r in gpus}
    # the costly counters are read every few samples: between reads a scrape shows the last read
    every = rows_of(mon(run_dir, schema.gpu_file(HOST)))
    for gpu, row in by_gpu.items():
        for col in HELD:
            if row[col] == "":
                before = [r[col] for r in every if r["gpu_index"] == gpu and float(r["time_unix"]) < ts
                          and r[col] != ""]
                by_gpu[gpu] = row = {**row, col: before[-1]}
    for name, (col, factor) in GPU_EXPECTED.items():
        got = {lab["gpu"]: (lab, v) for lab, v in series[name]}
        assert set(got) == {"0", "1"}, name
        for gpu, (lab, value) in got.items():
            row = by_gpu[gpu]
            assert lab == {**job, "gpu": gpu, "uuid": row["gpu_uuid"], "ranks": row["ranks"]}, lab
            assert close_to(value, row[col], factor), (name, gpu, value, row[col])
    assert {lab["ranks"] for lab, _ in series["hpclaunch_gpu_power_watts"]} == {"0", "1"}
    throttle = {(lab["gpu"], lab["reason"]): v for lab, v in series["hpclaunch_gpu_throttle_seconds_total"]}
    assert set(throttle) == {(g, r) for g in ("0", "1") for r in THROTTLE_REASONS}
    for (gpu, reason), value in throttle.items():
        assert value == pytest.approx(int(by_gpu[gpu][THROTTLE_REASONS[reason]]) / 1e9)
    assert throttle[("0", "sw_power_cap")] > 0
    assert {lab["gpu"]: v for lab, v in series["hpclaunch_gpu_sample_error"]} == {"0": 0.0, "1": 0.0}
    return host, by_gpu


def test_scrape_matches_the_csv_row_of_the_same_sample(tmp_path):
    port, held = free_ports()
    held[0].close()
    p = start(tmp_path, "--prometheus-port", str(port))
    try:
        port_file = mon(tmp_path, schema.prometheus_port_file(HOST))
        wait_for(lambda: os.path.exists(port_file), "port file")
        assert open(port_file).read() == f"{port}\n"
        wait_for(lambda: len(rows_of(mon(tmp_path, schema.host_file(HOST)))) >= 5, "5 host rows")
        xid_seen = False
        for _ in range(3):   # three scrapes, each against its own sample's rows
            series = parse(scrape(port))
            _, gpus = assert_matches_csv(series, tmp_path)
            xid_seen = xid_seen or gpus["1"]["xid_count"] == "1"
            time.sleep(0.25)
        assert xid_seen   # the XID raised 0.2 s in is counted, in the CSV and the counter alike
    finally:
        err = stop(p)
    assert "prometheus" not in err   # nothing to say: the port was free
    with pytest.raises(urllib.error.URLError):   # the server went with the monitor
        scrape(port)
    assert not os.path.exists(port_file)   # and so did the file that named it
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    [avail] = [e["detail"] for e in ev if e["detail"].get("source") == "prometheus"]
    assert avail["port"] == port and avail["asked_port"] == port and ev[-1]["kind"] == "stopped"


def test_the_final_sample_is_served_to_one_scrape_before_the_exporter_stops(tmp_path):
    """--prometheus-linger: after SIGTERM the exporter serves the final sample (every counter read)
    until a scrape has read it, then stops at once; with nobody scraping, it stops after the linger."""
    port, held = free_ports()
    held[0].close()
    p = start(tmp_path, "--prometheus-port", str(port), "--prometheus-linger", "20")
    wait_for(lambda: os.path.exists(mon(tmp_path, schema.prometheus_port_file(HOST))), "port file")
    wait_for(lambda: len(rows_of(mon(tmp_path, schema.host_file(HOST)))) >= 3, "3 host rows")
    p.send_signal(signal.SIGTERM)
    gpu_csv = mon(tmp_path, schema.gpu_file(HOST))
    time.sleep(1.0)   # the final sample is taken at once (interval 0.1 s)
    assert p.poll() is None   # still serving: nobody has read the final sample
    series = parse(scrape(port))
    rows = rows_of(gpu_csv)
    last = {r["gpu_index"]: r for r in rows}   # each GPU's final row
    [(_, samples)] = series["hpclaunch_monitor_samples_total"]
    assert samples == len(rows) / 2   # two GPUs a sample: the scrape shows the last one
    energy = {lab["gpu"]: v for lab, v in series["hpclaunch_gpu_energy_joules_total"]}
    assert energy == {g: pytest.approx(int(r["energy_mj"]) / 1000) for g, r in last.items()}
    t = time.monotonic()
    assert p.wait(timeout=15) == 0 and time.monotonic() - t < 5   # read: it stops now, not at 20 s
    # nobody scrapes: the monitor waits the linger (1 s here), then stops all the same
    other = tmp_path / "other"
    other.mkdir()
    q = start(other, "--prometheus-port", str(port), "--prometheus-linger", "1")
    wait_for(lambda: len(rows_of(mon(other, schema.host_file(HOST)))) >= 2, "2 host rows")
    t = time.monotonic()
    stop(q)
    assert 1.0 <= time.monotonic() - t < 10


def test_a_taken_port_moves_to_the_next_and_the_run_dir_says_which(tmp_path):
    base, held = free_ports(2)
    held[1].close()
    held[0].listen()   # another job's exporter on the asked port
    p = start(tmp_path, "--prometheus-port", str(base))
    try:
        port_file = mon(tmp_path, schema.prometheus_port_file(HOST))
        wait_for(lambda: os.path.exists(port_file), "port file")
        assert open(port_file).read() == f"{base + 1}\n"
        wait_for(lambda: len(rows_of(mon(tmp_path, schema.host_file(HOST)))) >= 3, "3 host rows")
        series = parse(scrape(base + 1))
        assert_matches_csv(series, tmp_path)
    finally:
        err = stop(p)
        held[0].close()
    lines = [ln for ln in err.splitlines() if "prometheus" in ln]
    assert lines == [f"hpclaunch-monitor: prometheus: port {base} is in use; serving on {base + 1} "
                     f"(written to {port_file})"], err


def test_all_ports_taken_warns_once_and_the_csv_goes_on(tmp_path):
    base, held = free_ports(8)
    for s in held:
        s.listen()
    port_file = mon(tmp_path, schema.prometheus_port_file(HOST))
    os.makedirs(os.path.dirname(port_file))
    with open(port_file, "w") as f:
        f.write("9999\n")   # an earlier attempt's: no longer true
    p = start(tmp_path, "--prometheus-port", str(base))
    try:
        wait_for(lambda: len(rows_of(mon(tmp_path, schema.gpu_file(HOST)))) >= 20, "10 samples of 2 GPUs")
    finally:
        err = stop(p)
        for s in held:
            s.close()
    assert p.returncode == 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"hpclaunch-monitor: prometheus: ports {base}-{base + 7} are all in use on this node; "
                     "no exporter on this node, the CSV logs go on"], err
    assert not os.path.exists(port_file)
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    assert [e["detail"]["reason"] for e in ev if e["kind"] == "source_unavailable"
            and e["detail"]["source"] == "prometheus"] == [f"ports {base}-{base + 7} are all in use on this node"]


@pytest.mark.parametrize("args,says", [
    (["--prometheus-port", "80"], "--prometheus-port 80: use a port from 1024 to 65535"),
    (["--prometheus-port", "65536"], "--prometheus-port 65536: use a port from 1024 to 65535"),
    (["--prometheus-linger", "61"], "--prometheus-linger 61: use 0 to 60 seconds"),
    (["--prometheus-linger", "nan"], "--prometheus-linger nan: use 0 to 60 seconds"),
    (["--prometheus-textfile", "/nonexistent-dir/job.prom"], "/nonexistent-dir is not a directory"),
    (["--prometheus-textfile", "TMP/job.txt"], "reads only *.prom files"),
])
def test_bad_exporter_options_are_one_line_and_exit_2(tmp_path, args, says):
    args = [a.replace("TMP", str(tmp_path)) for a in args]
    res = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--run-dir", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.strip().splitlines()[-1].count(says) == 1
    assert not os.path.exists(mon(tmp_path, schema.host_file("x")))


def promtool(require):
    tool = shutil.which("promtool")
    if tool is None:
        require("promtool is not installed (Debian's prometheus package: make deps)", "promtool checks")
    return tool


def test_textfile_is_replaced_whole_each_sample_and_promtool_accepts_it(tmp_path, require):
    tool = promtool(require)
    bad = subprocess.run([tool, "check", "metrics"], input="# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes 1\n",
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "_total" in bad.stdout + bad.stderr   # the linter does lint
    folder = tmp_path / "textfile-collector"
    folder.mkdir()
    path = folder / "hpclaunch-4242.prom"
    p = start(tmp_path, "--prometheus-textfile", str(path), interval=0.05, umask=0o077)
    try:
        wait_for(lambda: path.exists(), "the textfile")
        seen, names, inodes = set(), set(), set()
        for _ in range(150):   # read while the daemon rewrites it every 50 ms: never a partial file
            inodes.add(os.stat(path).st_ino)
            text = path.read_text()
            series = parse(text)
            [(_, ts)] = series["hpclaunch_monitor_last_sample_timestamp_seconds"]
            assert text.endswith("\n") and "hpclaunch_gpu_sample_error" in text
            seen.add(ts)
            names |= {n for n in os.listdir(folder) if n.endswith(".prom")}
            time.sleep(0.01)
        assert len(seen) >= 10 and names == {path.name}   # rewritten; the temporary file is never *.prom
        assert len(inodes) >= 2   # replaced by rename (a new file), not rewritten in place
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644   # node-exporter's user can read it, umask 077
        text = path.read_text()
        check = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr
        assert_matches_csv(parse(text), tmp_path)
    finally:
        stop(p)
    assert os.listdir(folder) == []   # removed at stop: a finished job's series go away


def test_a_prometheus_server_scrapes_a_local_jobs_monitor(tmp_path, hpc_home, require):
    """A local-backend job with monitor.prometheus_port; a real Prometheus scrapes it; PromQL finds the job."""
    server = shutil.which("prometheus")
    if server is None:
        require("the prometheus server is not installed (Debian's prometheus package: make deps)", "this test")
    mport, held = free_ports(2)
    qport = mport + 1
    for s in held:
        s.close()
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: prom scrape
profile: local
launcher: srun
command: [bash, -c, 'sleep 120']
resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: 1}}
monitor: {{interval: 1, prometheus_port: {mport}}}
requeue: {{max_attempts: 1}}
""")
    env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_PATH)
    env.pop("HPCLAUNCH_FAKE_NVML_SCENARIO", None)
    sub = json.loads(hl("submit", str(job), "--backend", "local", "--json", cwd=str(tmp_path), env=env).stdout)
    job_id = sub["job_id"]
    prom = None
    try:
        st = json.loads(hl("status", job_id, "--json", cwd="/", env=env).stdout)
        port_file = os.path.join(st["run_dir"], "monitor", schema.prometheus_port_file(socket.gethostname().split(".")[0]))
        wait_for(lambda: os.path.exists(port_file), "the job's monitor port file", timeout=30)
        assert open(port_file).read() == f"{mport}\n"
        prom = PrometheusServer(server, tmp_path, [f"127.0.0.1:{mport}"], qport)
        query = prom.query
        sel = f'{{job_id="{job_id}"}}'
        power = wait_for(lambda: query("hpclaunch_gpu_power_watts" + sel), "the job's GPU series in Prometheus",
                         timeout=60)
        assert len(power) == 2
        for r in power:
            m = r["metric"]
            assert m["job_id"] == job_id and m["job_name"] == "prom scrape" and m["job"] == "hpclaunch"
            assert m["node"] == socket.gethostname().split(".")[0] and m["user"] and m["uuid"].startswith("GPU-")
            assert 50 < float(r["value"][1]) < 1000
        load = query("hpclaunch_host_load1" + sel)
        assert load and load[0]["metric"]["instance"] == f"127.0.0.1:{mport}"
        assert [float(r["value"][1]) for r in query(f'up{{instance="127.0.0.1:{mport}"}}')] == [1.0]
        # a counter over the scrapes: energy keeps rising while the job runs
        # (the counter is read every 5 s: wait for a window that holds two reads)
        energy = wait_for(lambda: [r for r in query(f"increase(hpclaunch_gpu_energy_joules_total{sel}[10s])")
                                   or () if float(r["value"][1]) > 0] or None,
                          "two energy scrapes", timeout=30)
        assert len(energy) == 2
        assert all(float(r["value"][1]) > 0 for r in energy)
    finally:
        hl("cancel", job_id, cwd="/", env=env, check=False)
        if prom is not None:
            prom.close()


def test_a_profiles_textfile_dir_gets_one_file_per_job_and_node_that_promtool_accepts(tmp_path, hpc_home,
                                                                                      require):
    """monitor.prometheus_textfile_dir in a site's profile: a local job's monitor writes
    hpclaunch_<job>_<node>.prom there (the job's labels, accepted by promtool), removed at the end."""
    tool = promtool(require)
    folder = tmp_path / "textfile collector"   # a space: refused (site paths are kept plain)
    folder.mkdir()
    (tmp_path / "hpc_profiles").mkdir()
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        f"name: site\nextends: local\nmonitor: {{prometheus_textfile_dir: '{folder}'}}\n")
    job = tmp_path / "job.yaml"
    job.write_text("""
name: textfile job
profile: site
launcher: srun
command: [bash, -c, 'sleep 120']
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1}
monitor: {interval: 0.5}
requeue: {max_attempts: 1}
""")
    env = dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_PATH)
    env.pop("HPCLAUNCH_FAKE_NVML_SCENARIO", None)
    bad = hl("validate", str(job), cwd=str(tmp_path), env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "site.yaml: monitor.prometheus_textfile_dir" in bad.stderr and "not a plain path" in bad.stderr
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        "name: site\nextends: local\nmonitor: {prometheus_textfile_dir: var/textfiles}\n")
    bad = hl("validate", str(job), cwd=str(tmp_path), env=env, check=False)
    assert bad.returncode == 2 and "var/textfiles" in bad.stderr and "not an absolute path" in bad.stderr, bad.stderr
    folder = tmp_path / "textfile-collector"
    folder.mkdir()
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        f"name: site\nextends: local\nmonitor: {{prometheus_textfile_dir: {folder}}}\n")
    sub = json.loads(hl("submit", str(job), "--backend", "local", "--json", cwd=str(tmp_path), env=env).stdout)
    job_id = sub["job_id"]
    node = socket.gethostname().split(".")[0]
    path = folder / f"hpclaunch_{job_id}_{node}.prom"
    try:
        wait_for(lambda: path.exists(), "the job's textfile", timeout=30)
        assert os.listdir(folder) == [path.name]
        text = path.read_text()
        check = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        power = parse(text)["hpclaunch_gpu_power_watts"]
        assert len(power) == 2 and all(labels["job_id"] == job_id and labels["job_name"] == "textfile job"
                                       and labels["node"] == node for labels, _ in power), power
    finally:
        hl("cancel", job_id, cwd="/", env=env, check=False)
    wait_for(lambda: not os.listdir(folder), "the textfile removed when the job ends", timeout=60)
