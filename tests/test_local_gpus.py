"""The local backend hands out GPUs as Slurm's gres would: a job that asks for N holds N of the
machine's GPUs (CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS), no two running jobs share one, and a job
waits PENDING while others hold them. No GPU here: the machine's GPUs are declared through
HPCLAUNCH_LOCAL_GPUS or a fake driver folder; the leases are real flocks."""
import json
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.local_gpus import machine_gpus, try_lease


@pytest.fixture(autouse=True)
def private_leases(tmp_path_factory, monkeypatch):
    """Each test's own lease folder (the user's is under TMPDIR): another run of the suite on this
    machine, or the user's own local jobs, never holds the GPUs a test declares."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again


def test_the_machines_gpus_first_that_says(tmp_path):
    driver = tmp_path / "gpus"
    driver.mkdir()
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (driver / bus).mkdir()
    assert machine_gpus({}, str(driver)) == ["0", "1"]
    assert machine_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}, str(driver)) == ["3", "1"]
    assert machine_gpus({"HPCLAUNCH_LOCAL_GPUS": " 2 ", "CUDA_VISIBLE_DEVICES": "3"}, str(driver)) == ["2"]
    assert machine_gpus({"HPCLAUNCH_LOCAL_GPUS": "GPU-8f3a-11, MIG-a1b2"}, str(driver)) == ["GPU-8f3a-11", "MIG-a1b2"]
    no_nvml = lambda: 0  # noqa: E731 (this machine's NVML, if any, stays out of it)
    assert machine_gpus({}, str(tmp_path / "none"), no_nvml) is None      # no driver folder: unknown (a Jetson)
    (tmp_path / "empty").mkdir()
    assert machine_gpus({}, str(tmp_path / "empty"), no_nvml) is None
    assert machine_gpus({}, str(tmp_path / "empty"), lambda: 2) == ["0", "1"]
    # CUDA's own rule for its variable: the list ends at the first entry it cannot use
    assert machine_gpus({"CUDA_VISIBLE_DEVICES": "2,0,-1,3"}, str(driver)) == ["2", "0"]
    assert machine_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, str(driver)) == []             # every GPU hidden
    assert machine_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, str(driver)) == []     # Slurm's "none"
    for value in ("0,0", "0;rm -rf", "../x", "1,,x y"):
        with pytest.raises(HpclaunchError, match="HPCLAUNCH_LOCAL_GPUS=.*e.g. HPCLAUNCH_LOCAL_GPUS=0,1"):
            machine_gpus({"HPCLAUNCH_LOCAL_GPUS": value}, str(driver))


def test_without_the_drivers_folder_nvml_counts_them(tmp_path):
    """gVisor and some containers have no /proc/driver/nvidia: NVML's count, through the real
    nvidia-ml-py over the tests' fake libnvidia-ml (tests/monitors/fake_libnvml.c)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    src = os.path.join(os.path.dirname(__file__), "monitors", "fake_libnvml.c")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib / "libnvidia-ml.so.1"), src], check=True)
    code = ("from hpclaunch.launchers.backends.local_gpus import machine_gpus; "
            f"print(machine_gpus({{}}, {str(tmp_path / 'no-driver')!r}))")
    for gpus, want in (("3", "['0', '1', '2']"), ("0", "None")):
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "FAKE_LIBNVML_GPUS": gpus}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, out
    # no library at all: unknown
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None", out


def test_leases_are_exclusive_lowest_first_and_end_with_their_holder(tmp_path):
    folder = str(tmp_path / "leases")
    a = try_lease(["0", "1", "2"], 2, folder)
    assert a.ids == ["0", "1"] and a.env()["CUDA_VISIBLE_DEVICES"] == "0,1" == a.env()["SLURM_JOB_GPUS"]
    assert try_lease(["0", "1", "2"], 2, folder) is None       # one free: nothing held
    b = try_lease(["0", "1", "2"], 1, folder)
    assert b.ids == ["2"]
    a.release()
    assert try_lease(["0", "1", "2"], 2, folder).ids == ["0", "1"]
    # another process's lease holds until that process is gone, however it ends
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from hpclaunch.launchers.backends.local_gpus import try_lease\n"
                               f"l = try_lease(['5'], 1, {folder!r}); print(l.ids, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "['5']"
    assert try_lease(["5"], 1, folder) is None
    holder.kill()
    holder.wait()
    assert try_lease(["5"], 1, folder).ids == ["5"]


def test_a_lease_folder_others_can_write_is_refused(tmp_path):
    base = tmp_path / "hpclaunch-x"
    folder = base / "gpu-leases"
    assert try_lease(["0"], 1, str(folder)).ids == ["0"]
    os.chmod(folder, 0o777)                  # anyone could hold our locks or plant links
    with pytest.raises(HpclaunchError, match="gpu-leases: the GPU lease folder is not yours alone .*mode 777"):
        try_lease(["0"], 1, str(folder))
    os.chmod(folder, 0o700)
    os.symlink("/etc/passwd", folder / "gpu-1.lock")  # a planted link is not followed: that GPU is held
    assert try_lease(["1"], 1, str(folder)) is None


def _job(tmp_path, name, gpus, sleep):
    (tmp_path / "quad.yaml").write_text("name: quad\nextends: workstation\nnode: {gpus: 4}\n")
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""
name: {name}
profile: ./quad.yaml
launcher: srun
command: [bash, -c, 'echo "gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_GPUS step=$SLURM_STEP_GPUS"; sleep {sleep}']
resources: {{gpus_per_node: {gpus}, cpus_per_task: 1, mem: 1G}}
monitor: {{interval: 0}}
""")
    return str(path)


def _gpus_seen(run_dir):
    line = open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read().split("\n")[0]
    fields = dict(f.split("=", 1) for f in line.split())
    assert fields["gpus"] == fields["job"] == fields["step"], line
    return fields["gpus"].split(",")


def _status(job_id, env):
    return json.loads(hl("status", job_id, "--json", cwd="/", env=env).stdout)


def _wait_final(job_id, env, timeout=60.0):
    deadline = time.time() + timeout
    while True:
        st = _status(job_id, env)
        if st["state"] not in ("PENDING", "RUNNING") or time.time() > deadline:
            return st
        time.sleep(0.5)


def test_concurrent_local_jobs_get_their_own_gpus_and_wait_for_them(hpc_home, tmp_path):
    env = {**os.environ, "HPCLAUNCH_LOCAL_GPUS": "0,1,2"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    jobs = []
    for name, gpus in (("two", 2), ("one", 1), ("waits", 2)):
        out = hl("submit", _job(tmp_path, name, gpus, 3), "--backend", "local", "--json", cwd=str(tmp_path), env=env)
        jobs.append(json.loads(out.stdout))
    time.sleep(1.0)
    st = _status(jobs[2]["job_id"], env)
    assert st["state"] == "PENDING" and "waiting for 2 GPU(s) of 0,1,2" in st["reason"], st
    states = [_wait_final(j["job_id"], env)["state"] for j in jobs]
    assert states == ["COMPLETED"] * 3
    two, one, waits = (_gpus_seen(j["run_dir"]) for j in jobs)
    assert len(two) == 2 and len(one) == 1 and not set(two) & set(one), (two, one)
    assert sorted(two + one) == ["0", "1", "2"]
    assert len(waits) == 2


def test_more_gpus_than_the_machine_has_is_refused_at_submit(hpc_home, tmp_path):
    env = {**os.environ, "HPCLAUNCH_LOCAL_GPUS": "0,1"}
    proc = hl("submit", _job(tmp_path, "big", 3, 0), "--backend", "local", cwd=str(tmp_path), env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "resources.gpus_per_node: 3 asked, this machine has 2 GPU(s) (0,1)" in proc.stderr
    assert "HPCLAUNCH_LOCAL_GPUS" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(hl("list", "--all", "--json", cwd="/", env=env).stdout) == []   # nothing queued
    hidden = {k: v for k, v in env.items() if k != "HPCLAUNCH_LOCAL_GPUS"}
    none = hl("submit", _job(tmp_path, "none", 1, 0), "--backend", "local", cwd=str(tmp_path),
              env={**hidden, "CUDA_VISIBLE_DEVICES": "-1"}, check=False)
    assert none.returncode == 2 and "1 asked, this machine has 0 GPU(s) (CUDA_VISIBLE_DEVICES=-1)" in none.stderr, \
        none.stderr
    bad = hl("submit", _job(tmp_path, "bad", 1, 0), "--backend", "local", cwd=str(tmp_path),
             env={**env, "HPCLAUNCH_LOCAL_GPUS": "0;reboot"}, check=False)
    assert bad.returncode == 2 and "HPCLAUNCH_LOCAL_GPUS='0;reboot'" in bad.stderr, bad.stderr


def test_the_gpu_lease_bench_runs_here_on_the_cpu(tmp_path):
    """bench/gpu/local_gpus_gpu.py runs on a GPU only when one is lent: here, with one GPU declared,
    its two jobs take turns on it, so the script cannot rot between loans."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "gpu",
                          "local_gpus_gpu.py")
    proc = subprocess.run([sys.executable, script, "--out", str(tmp_path / "out"), "--seconds", "2"],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "\n0 check(s) failed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "[ok] the second job waited PENDING for the GPU" in proc.stdout
    reports = sorted((tmp_path / "out").glob("report-job-*.json"))  # each job's report kept, as JSON
    assert len(reports) == 2 and all(json.loads(r.read_text())["gpus"] == [] for r in reports), reports


def test_each_local_jobs_energy_is_its_own_gpus(hpc_home, tmp_path):
    """Two 1-GPU jobs side by side on a 2-GPU machine (the tests' fake NVML: two H100 boards): each
    monitor logs and each report counts only the job's leased GPU, attributed to its rank."""
    env = {**os.environ, "HPCLAUNCH_LOCAL_GPUS": "0,1",
           "HPCLAUNCH_MONITOR_FAKE_NVML": os.path.join(os.path.dirname(os.path.abspath(__file__)), "monitors",
                                                       "fake_nvml.py")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    jobs = []
    for name in ("left", "right"):
        path = _job(tmp_path, name, 1, 3)
        with open(path) as f:
            body = f.read().replace("monitor: {interval: 0}", "monitor: {interval: 0.2}")
        with open(path, "w") as f:
            f.write(body)
        jobs.append(json.loads(hl("submit", path, "--backend", "local", "--json", cwd=str(tmp_path), env=env).stdout))
    assert [_wait_final(j["job_id"], env)["state"] for j in jobs] == ["COMPLETED"] * 2
    leased = [_gpus_seen(j["run_dir"]) for j in jobs]
    assert sorted(leased) == [["0"], ["1"]], leased
    for job, gpus in zip(jobs, leased):
        doc = json.loads(hl("report", job["run_dir"], "--format", "json", cwd="/", env=env).stdout)
        assert [str(g["index"]) for g in doc["gpus"]] == gpus, (gpus, doc["gpus"])
        assert doc["gpus"][0]["ranks"] == [0] and doc["gpus"][0]["energy_j"] > 0, doc["gpus"]


def test_a_gpu_submit_asks_the_machine_for_its_gpus_once(hpc_home, tmp_path, monkeypatch):
    """check() and start() of one submit share one lookup: where only NVML can count the GPUs,
    each lookup is an nvmlInit (up to ~100 ms on a real driver)."""
    from hpclaunch.launchers.backends import local
    from hpclaunch.runs.submission import submit

    calls = []
    monkeypatch.setattr(local, "machine_gpus", lambda env: calls.append(1) or ["0", "1"])
    job = submit(_job(tmp_path, "once", 1, 0), backend="local", cwd=str(tmp_path))
    assert len(calls) == 1
    st = _wait_final(job.id, dict(os.environ))
    assert st["state"] == "COMPLETED", st
    assert _gpus_seen(job.record.run_dir) == ["0"]   # the looked-up list reached the runner's lease
    again = submit(_job(tmp_path, "twice", 1, 0), backend="local", cwd=str(tmp_path))
    assert len(calls) == 2                            # a new submit looks again
    assert _wait_final(again.id, dict(os.environ))["state"] == "COMPLETED"


# -- a lease folder the machine's users share (HPCLAUNCH_GPU_LEASE_DIR) ---------------------------------

@pytest.fixture
def shared_dir():
    """A folder made as an admin would (root's, mode 1777), outside pytest's private tmp_path so
    that another user can reach it."""
    import shutil
    import tempfile

    assert os.getuid() == 0, "these tests switch to another user (uid 65534) and need root, as CI has"
    top = tempfile.mkdtemp(prefix="hpclaunch-shared-leases-", dir="/tmp")
    os.chmod(top, 0o755)
    folder = os.path.join(top, "gpu-leases")
    os.mkdir(folder)
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(top)


HOLD = """
import sys, time
from hpclaunch.launchers.backends.local_gpus import try_lease
lease = try_lease(sys.argv[2].split(","), int(sys.argv[3]), sys.argv[1], shared=True)
print("held", ",".join(lease.ids) if lease else "none", flush=True)
time.sleep(60)
"""


def _as_nobody(folder, ids, count):
    """Another user (uid 65534) leasing GPUs in ``folder`` with hpclaunch's own code; it holds them
    until killed."""
    proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", HOLD,
                             folder, ids, str(count)], stdout=subprocess.PIPE, text=True, cwd="/",
                            env={**os.environ, "HOME": "/"})
    return proc, proc.stdout.readline().split()


def test_users_sharing_a_lease_folder_never_share_a_gpu(shared_dir):
    old = os.umask(0o077)   # a lock file made here must still open for the other user
    try:
        mine = try_lease(["0", "1", "2"], 1, shared_dir, shared=True)
    finally:
        os.umask(old)
    assert mine.ids == ["0"]
    assert os.stat(os.path.join(shared_dir, "gpu-0.lock")).st_mode & 0o777 == 0o644
    other, said = _as_nobody(shared_dir, "0,1,2", 2)
    try:
        assert said == ["held", "1,2"]                                   # not root's GPU 0
        assert os.stat(os.path.join(shared_dir, "gpu-1.lock")).st_uid == 65534
        assert try_lease(["0", "1", "2"], 1, shared_dir, shared=True) is None   # all three held, by two users
        mine.release()
        again = try_lease(["0", "1", "2"], 1, shared_dir, shared=True)
        assert again.ids == ["0"]
        again.release()
    finally:
        other.kill()
        other.wait()
    freed = try_lease(["0", "1", "2"], 3, shared_dir, shared=True)   # the other user's locks died with it
    assert freed.ids == ["0", "1", "2"]
    freed.release()


def test_a_planted_lock_file_is_as_good_as_held_and_never_hangs(shared_dir):
    os.mkfifo(os.path.join(shared_dir, "gpu-0.lock"))                  # a FIFO: a blocking open would wait forever
    os.symlink("/etc/passwd", os.path.join(shared_dir, "gpu-1.lock"))  # a link: never followed
    unreadable = os.path.join(shared_dir, "gpu-2.lock")
    open(unreadable, "w").close()
    os.chmod(unreadable, 0o600)                                        # root's, unreadable to the other user
    stuck: list = []
    assert try_lease(["0", "1"], 1, shared_dir, shared=True, stuck=stuck) is None
    assert stuck == [f"{shared_dir}/gpu-0.lock (not a regular file, owner uid 0)",
                     f"{shared_dir}/gpu-1.lock (a link, owner uid 0)"], stuck
    other, said = _as_nobody(shared_dir, "0,1,2,3", 1)
    other.kill()
    other.wait()
    assert said == ["held", "3"]
    assert os.stat("/etc/passwd").st_size > 0


def test_a_group_lease_folder_with_links_planted_by_a_member_writes_nothing_through_them(shared_dir, tmp_path):
    """The other kind of shared folder (install -d -m 3770 -g GROUP): a member's links at the lock
    files' names are never followed; the file they name keeps its content and mode (issue 44's
    audit of writers into shared folders: a lock file is opened read-only, O_NOFOLLOW, and only a
    file made here with O_EXCL is chmod-ed)."""
    folder = os.path.join(os.path.dirname(shared_dir), "group-leases")
    os.mkdir(folder)
    os.chown(folder, 0, 65534)
    os.chmod(folder, 0o3770)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.chmod(victim, 0o600)
    for gpu in ("0", "1"):
        link = os.path.join(folder, f"gpu-{gpu}.lock")
        os.symlink(victim, link)
        os.lchown(link, 65534, 65534)
    stuck: list = []
    lease = try_lease(["0", "1", "2"], 1, folder, shared=True, stuck=stuck)
    assert lease.ids == ["2"] and len(stuck) == 2 and all("(a link, owner uid 65534)" in w for w in stuck), stuck
    lease.release()
    assert victim.read_text() == "keep\n" and os.stat(victim).st_mode & 0o7777 == 0o600


def test_a_shared_lease_folder_others_could_tamper_with_is_refused(shared_dir, tmp_path):
    from hpclaunch.launchers.backends.local_gpus import shared_lease_dir

    assert shared_lease_dir(shared_dir) == shared_dir
    cases = {"relative/leases": "not an absolute path",
             str(tmp_path / "missing"): "install -d -m 1777",
             "/etc/passwd": "not a folder"}
    nosticky = tmp_path / "nosticky"
    nosticky.mkdir()
    os.chmod(nosticky, 0o777)
    cases[str(nosticky)] = "chmod +t"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o1777)
    os.chown(theirs, 65534, 65534)
    cases[str(theirs)] = "owned by uid 65534"
    for folder, fix in cases.items():
        with pytest.raises(HpclaunchError) as e:
            shared_lease_dir(folder)
        assert "HPCLAUNCH_GPU_LEASE_DIR=" in str(e.value) and fix in str(e.value), (folder, str(e.value))
    # the runner names the setting the folder came from (a profile's), should it go bad while a job waits
    setting = f"profile 'site': local.gpu_lease_dir: '{nosticky}'"
    with pytest.raises(HpclaunchError, match=f"^{setting}: others may write in it"):
        try_lease(["0"], 1, str(nosticky), shared=True, what=setting)


def test_a_local_job_takes_the_gpu_another_user_left_free(hpc_home, tmp_path, shared_dir):
    env = {**os.environ, "HPCLAUNCH_LOCAL_GPUS": "0,1", "HPCLAUNCH_GPU_LEASE_DIR": shared_dir}
    other, said = _as_nobody(shared_dir, "0,1", 1)
    try:
        assert said == ["held", "0"]
        sub = json.loads(hl("submit", _job(tmp_path, "beside", 1, 0), "--backend", "local", "--json",
                            cwd=str(tmp_path), env=env).stdout)
        waits = json.loads(hl("submit", _job(tmp_path, "waits", 2, 0), "--backend", "local", "--json",
                              cwd=str(tmp_path), env=env).stdout)
        assert _wait_final(sub["job_id"], env)["state"] == "COMPLETED"
        assert _gpus_seen(sub["run_dir"]) == ["1"]
        st = _status(waits["job_id"], env)
        assert st["state"] == "PENDING" and f"any user's, through {shared_dir}" in st["reason"], st
    finally:
        other.kill()
        other.wait()
    assert _wait_final(waits["job_id"], env)["state"] == "COMPLETED"
    assert _gpus_seen(waits["run_dir"]) == ["0", "1"]
    bad = hl("submit", _job(tmp_path, "bad", 1, 0), "--backend", "local", cwd=str(tmp_path),
             env={**env, "HPCLAUNCH_GPU_LEASE_DIR": str(tmp_path / "nowhere")}, check=False)
    assert bad.returncode == 2 and "install -d -m 1777" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_a_job_stuck_on_a_lock_file_no_lease_can_take_says_which(hpc_home, tmp_path):
    """A lock file no job's end will free (here a FIFO put where GPU 0's lock goes while the job already
    waits for a GPU) is named in the waiting job's reason, with the fix; once it is gone the job runs."""
    from hpclaunch.launchers.backends.local_gpus import private_lease_dir

    held0, held1 = try_lease(["0"], 1), try_lease(["1"], 1)
    env = {**os.environ, "HPCLAUNCH_LOCAL_GPUS": "0,1"}
    sub = json.loads(hl("submit", _job(tmp_path, "stuck", 1, 0), "--backend", "local", "--json",
                        cwd=str(tmp_path), env=env).stdout)

    def reason_once(cond):
        deadline = time.time() + 30
        while not cond((st := _status(sub["job_id"], env))["reason"] or ""):
            assert st["state"] == "PENDING" and time.time() < deadline, st
            time.sleep(0.3)
        return st["reason"]

    assert "no lease can take" not in reason_once(lambda r: "other local jobs hold them" in r)
    fifo = os.path.join(private_lease_dir(), "gpu-0.lock")
    os.mkfifo(fifo + ".new")
    os.replace(fifo + ".new", fifo)   # in place of the file this test's lease still locks: no moment free
    held0.release()                   # GPU 0's old lock ends; GPU 1 stays held
    reason = reason_once(lambda r: "no lease can take" in r)
    assert f"{fifo} (not a regular file, owner uid 0)" in reason and "admin must remove" in reason, reason
    os.unlink(fifo)
    assert _wait_final(sub["job_id"], env)["state"] == "COMPLETED"
    assert _gpus_seen(sub["run_dir"]) == ["0"]
    held1.release()


def test_a_profile_can_name_the_machines_shared_lease_folder(hpc_home, tmp_path, shared_dir):
    """A workstation's site profile says where every user's leases go (local.gpu_lease_dir), so its
    users need no variable: a job waits while another user holds the GPU there, and takes it once
    freed. HPCLAUNCH_GPU_LEASE_DIR still wins; a folder that is not there, or a relative path, is one
    line naming the profile, the field and the value, exit 2."""
    def job(name, lease_dir):
        (tmp_path / "site.yaml").write_text(f"name: site\nextends: workstation\nnode: {{gpus: 1}}\n"
                                            f"local: {{gpu_lease_dir: {json.dumps(lease_dir)}}}\n")
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\nprofile: ./site.yaml\nlauncher: srun\n"
                        "command: [bash, -c, 'echo gpus=$CUDA_VISIBLE_DEVICES']\n"
                        "resources: {gpus_per_node: 1, cpus_per_task: 1, mem: 1G}\nmonitor: {interval: 0}\n")
        return str(path)

    env = {k: v for k, v in os.environ.items() if k != "HPCLAUNCH_GPU_LEASE_DIR"}
    env["HPCLAUNCH_LOCAL_GPUS"] = "0"
    other, said = _as_nobody(shared_dir, "0", 1)
    try:
        assert said == ["held", "0"]
        sub = json.loads(hl("submit", job("waits", shared_dir), "--backend", "local", "--json",
                            cwd=str(tmp_path), env=env).stdout)
        deadline = time.time() + 30
        while "through " + shared_dir not in ((st := _status(sub["job_id"], env))["reason"] or ""):
            assert st["state"] == "PENDING" and time.time() < deadline, st
            time.sleep(0.3)
        # the variable wins over the profile (whose folder is not there: refused below)
        mine = json.loads(hl("submit", job("own", str(tmp_path / "nowhere")), "--backend", "local", "--json",
                             cwd=str(tmp_path), env={**env, "HPCLAUNCH_GPU_LEASE_DIR": shared_dir}).stdout)
        deadline = time.time() + 30
        while "through " + shared_dir not in ((st := _status(mine["job_id"], env))["reason"] or ""):
            assert st["state"] == "PENDING" and time.time() < deadline, st
            time.sleep(0.3)
    finally:
        other.kill()
        other.wait()
    assert _wait_final(sub["job_id"], env)["state"] == "COMPLETED"
    assert _wait_final(mine["job_id"], env)["state"] == "COMPLETED"
    bad = hl("submit", job("bad", str(tmp_path / "nowhere")), "--backend", "local", cwd=str(tmp_path), env=env,
             check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert f"profile 'site': local.gpu_lease_dir: '{tmp_path / 'nowhere'}'" in bad.stderr, bad.stderr
    assert "install -d -m 1777" in bad.stderr, bad.stderr
    rel = hl("submit", job("rel", "leases"), "--backend", "local", cwd=str(tmp_path), env=env, check=False)
    assert rel.returncode == 2 and "site.yaml" in rel.stderr and "local.gpu_lease_dir" in rel.stderr \
        and "not an absolute path" in rel.stderr, rel.stderr
