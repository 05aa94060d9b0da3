"""Slurm's real output, recorded on the test cluster (tests/fixtures/slurm/, see its README.md and
record.sh), fed to hpclaunch's parsers: no Slurm, no root, no cluster needed.

Job ids change at every re-recording: they are read from jobs.txt, never written here."""
import os
import re
import subprocess
from dataclasses import replace

import pytest

from hpclaunch.common.errors import InvalidInput
from hpclaunch.launchers.backends import slurm as slurm_backend
from hpclaunch.launchers.backends import slurm_preflight, slurm_status, slurmcli
from hpclaunch.launchers.backends.base import JobRef, JobStatus, State
from hpclaunch.launchers.plan import build_plan
from hpclaunch.spec.loading import resolve_job
from hpclaunch.spec.typedload import SourceMap

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "slurm")


def read(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


JOBS = {name: job_id for name, job_id in slurmcli.columns(read("jobs.txt"))}
ARR = JOBS["array"]


def records(name):
    return slurmcli.parse_records(read(name))


def one_squeue(name, job):
    rows = slurm_status.parse_squeue(read(name))
    assert list(rows) == [JOBS[job]]
    return rows[JOBS[job]]


# --- the recording itself -------------------------------------------------------------------------

def test_recorded_jobs_and_commands_are_listed():
    assert list(JOBS) == ["held", "begin", "running", "completed", "failed", "signalled", "timeout",
                          "requeued", "array", "twonode", "wall", "behind"]
    assert all(j.isdigit() for j in JOBS.values())
    commands = read("commands.txt")
    # record.sh used the code's own command lines: the files name them.
    assert f"squeue-held.txt: squeue_cmd {JOBS['held']}\n" in commands
    assert slurm_status.squeue_cmd(["1"]) == ["squeue", "-h", "-r", "-j", "1", "-o", "%i|%T|%M|%N|%r|%S"]
    assert slurm_status.sacct_cmd(["1"]) == ["sacct", "-n", "-P", "-X", "-D", "-j", "1", "-o",
                                             "JobID,State,ExitCode,Elapsed,NodeList,End,Start"]
    # record.sh writes the code's field lists out: they must not drift apart
    script = read("record.sh")
    assert f'SACCT_FIELDS="{slurm_status.SACCT_FIELDS}"' in script
    assert f'SQUEUE_FORMAT="{slurm_status.SQUEUE_FORMAT}"' in script
    # No fixture starts with a comment line a parser would read as data.
    for name in os.listdir(FIX):
        if name.endswith(".txt") and not name.startswith("synthetic-"):
            assert not read(name).startswith("#"), name


def test_sbatch_parsable_prints_the_job_id_alone():
    text = read("sbatch-parsable.txt")
    assert text == f"{JOBS['held']}\n"
    assert text.strip().split(";")[0] == JOBS["held"]  # what SlurmBackend.sbatch keeps


# --- squeue: live jobs ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,job,state,nodes,reason", [
    ("squeue-held.txt", "held", State.PENDING, "", "JobHeldUser"),
    ("squeue-begin.txt", "begin", State.PENDING, "", "BeginTime"),
    ("squeue-running.txt", "running", State.RUNNING, "one", "None"),
    ("squeue-twonode.txt", "twonode", State.RUNNING, "c[1-2]", "None"),
    ("squeue-requeued-pending.txt", "requeued", State.PENDING, "", "BeginTime"),
    ("squeue-requeued-running.txt", "requeued", State.RUNNING, "one", "None"),
])
def test_squeue_one_job(name, job, state, nodes, reason):
    st = slurm_status.from_squeue(one_squeue(name, job), 0)
    assert st.state is state and not st.final
    assert st.reason == reason and st.source == "squeue" and st.exit_code is None and st.attempts == 1
    if nodes == "one":
        assert re.fullmatch(r"c[12]", st.nodes), st.nodes
    else:
        assert st.nodes == nodes
    assert re.fullmatch(r"\d+:\d\d", st.elapsed), st.elapsed


def test_squeue_a_job_waiting_behind_another_has_its_reason_and_expected_start():
    """Job `behind` needs every CPU of both nodes while `wall` holds them: squeue's %r says why it
    waits (Resources, or Priority once the backfill scheduler has planned it) and %S when it should start."""
    st = slurm_status.from_squeue(one_squeue("squeue-behind.txt", "behind"), 0)
    assert st.state is State.PENDING and st.reason in ("Resources", "Priority"), st
    assert st.expected_start is not None and st.start_time is None
    (rec,) = records("scontrol-show-job-behind.txt")
    assert slurm_status.time_of(rec["StartTime"]) == st.expected_start
    held = slurm_status.from_squeue(one_squeue("squeue-held.txt", "held"), 0)
    assert held.expected_start is None and held.reason == "JobHeldUser"   # %S: N/A
    running = slurm_status.from_squeue(one_squeue("squeue-running.txt", "running"), 0)
    assert running.expected_start is None and running.start_time is not None


def test_squeue_of_a_recording_without_start_still_parses():
    """A row of the format before %S was added: five columns."""
    row = slurm_status.parse_squeue("12|PENDING|0:00||Priority\n")["12"]
    st = slurm_status.from_squeue(row, 0)
    assert (st.state, st.reason, st.expected_start) == (State.PENDING, "Priority", None)
    rows = slurm_status.parse_sacct("12|REQUEUED|0:0|00:00:07|c2|2026-11-29T00:00:09\n")["12"]
    assert slurm_status.from_sacct(rows, "12").history[0].start_time is None


def test_squeue_all_jobs_in_one_call():
    rows = slurm_status.parse_squeue(read("squeue-all-early.txt"))
    want = {JOBS["held"]: State.PENDING, JOBS["begin"]: State.PENDING, JOBS["twonode"]: State.PENDING,
            JOBS["running"]: State.RUNNING, JOBS["timeout"]: State.RUNNING, JOBS["requeued"]: State.RUNNING,
            f"{ARR}_0": State.RUNNING, f"{ARR}_1": State.RUNNING, f"{ARR}_2": State.PENDING,
            f"{ARR}_3": State.PENDING, JOBS["wall"]: State.PENDING, JOBS["behind"]: State.PENDING}
    assert {jid: slurm_status.state_of(row[0]) for jid, row in rows.items()} == want
    assert rows[JOBS["held"]][3] == "JobHeldUser" and rows[f"{ARR}_2"][3] == "JobArrayTaskLimit"
    # Later only the two never-started jobs are left.
    assert set(slurm_status.parse_squeue(read("squeue-all.txt"))) == {JOBS["held"], JOBS["begin"]}


def test_squeue_of_an_unknown_job_fails_the_call_but_not_a_list_with_one():
    assert read("squeue-unknown.rc.txt").strip() == "1"
    assert read("squeue-unknown.txt") == ""
    err = read("squeue-unknown.stderr.txt")
    assert slurmcli.first_line(err) == "slurm_load_jobs error: Invalid job id specified"
    assert not slurmcli.is_transient(err)
    assert slurm_status.parse_squeue(read("squeue-unknown.txt")) == {}
    # A forgotten id among known ones: squeue answers for the known one, exit 0 (no .rc file).
    assert not os.path.exists(os.path.join(FIX, "squeue-mixed-unknown.rc.txt"))
    assert list(slurm_status.parse_squeue(read("squeue-mixed-unknown.txt"))) == [JOBS["held"]]


# --- sacct: ended jobs, every attempt -------------------------------------------------------------

@pytest.mark.parametrize("name,job,state,code,raw", [
    ("sacct-completed.txt", "completed", State.COMPLETED, 0, "0:0"),
    ("sacct-failed.txt", "failed", State.FAILED, 3, "3:0"),
    ("sacct-signalled.txt", "signalled", State.FAILED, 128 + 9, "0:9"),   # kill -9 of the batch shell
    ("sacct-cancelled.txt", "cancelled", State.CANCELLED, 0, "0:0"),      # "CANCELLED by 0"
    ("sacct-timeout.txt", "timeout", State.TIMEOUT, 0, "0:0"),
    ("sacct-twonode.txt", "twonode", State.COMPLETED, 0, "0:0"),
])
def test_sacct_final_states(name, job, state, code, raw):
    job_id = JOBS["running" if job == "cancelled" else job]
    rows = slurm_status.parse_sacct(read(name))
    assert list(rows) == [job_id] and len(rows[job_id]) == 1
    assert rows[job_id][0][1] == raw
    st = slurm_status.from_sacct(rows[job_id])
    assert st.state is state and st.final and st.exit_code == code and st.attempts == 1
    assert st.source == "sacct"
    assert st.nodes == ("c[1-2]" if job == "twonode" else st.nodes) and re.fullmatch(r"c(\[1-2\]|[12])", st.nodes)


def test_sacct_end_is_the_controllers_end_time():
    """The registry keeps when a job ended (the fleet view's window); sacct's End agrees with the
    controller's EndTime of the same job; a running job has none."""
    ended = slurm_status.from_sacct(slurm_status.parse_sacct(read("sacct-completed.txt"))[JOBS["completed"]])
    [rec] = records("scontrol-show-job-completed.txt")
    assert ended.end_time == slurm_status.end_time_of(rec["EndTime"]) and ended.end_time > 1.7e9
    running = slurm_status.from_sacct(slurm_status.parse_sacct(read("sacct-requeued-running.txt"))[JOBS["requeued"]])
    assert running.end_time is None
    assert slurm_status.end_time_of("Unknown") is None and slurm_status.end_time_of("") is None


def test_sacct_words_and_times():
    assert slurm_status.parse_sacct(read("sacct-cancelled.txt"))[JOBS["running"]][0][0] == "CANCELLED by 0"
    # --time=1 and sleep 200: killed after its minute (plus up to the controller's check interval).
    elapsed = slurm_status.parse_sacct(read("sacct-timeout.txt"))[JOBS["timeout"]][0][2]
    h, m, s = map(int, elapsed.split(":"))
    assert 60 <= h * 3600 + m * 60 + s < 200


def test_sacct_requeued_job_counts_attempts():
    rows = slurm_status.parse_sacct(read("sacct-requeued.txt"))[JOBS["requeued"]]
    assert [r[0] for r in rows] == ["REQUEUED", "COMPLETED"]
    st = slurm_status.from_sacct(rows, JOBS["requeued"])
    assert (st.state, st.exit_code, st.attempts) == (State.COMPLETED, 0, 2)
    # every attempt, as the scheduler saw it: its state, start, end, elapsed and nodes
    first, second = st.history
    assert (first.job_id, first.state, second.state) == (JOBS["requeued"], State.REQUEUED, State.COMPLETED)
    assert first.start_time < first.end_time <= second.start_time < second.end_time == st.end_time
    assert first.elapsed_s == first.end_time - first.start_time and second.elapsed_s == 20   # `sleep 20`
    assert re.fullmatch(r"c[12]", first.nodes) and re.fullmatch(r"c[12]", second.nodes)
    running = slurm_status.from_sacct(slurm_status.parse_sacct(read("sacct-requeued-running.txt"))[JOBS["requeued"]])
    assert (running.state, running.attempts, running.final) == (State.RUNNING, 2, False)


def test_sacct_all_jobs_in_one_call():
    rows = slurm_status.parse_sacct(read("sacct-all.txt"))
    assert {j: len(r) for j, r in rows.items() if len(r) != 1} == {JOBS["requeued"]: 2}
    got = {j: slurm_status.from_sacct(r).state for j, r in rows.items()}
    assert got[JOBS["held"]] is State.PENDING and rows[JOBS["held"]][0][3] == "None assigned"
    assert got[JOBS["signalled"]] is State.FAILED and got[JOBS["timeout"]] is State.TIMEOUT
    assert got[JOBS["running"]] is State.CANCELLED and got[JOBS["requeued"]] is State.COMPLETED
    assert sorted(j for j in rows if j.startswith(f"{ARR}_")) == [f"{ARR}_{i}" for i in range(4)]


def test_sacct_of_an_unknown_job_is_empty_and_succeeds():
    assert read("sacct-unknown.txt") == ""
    assert not os.path.exists(os.path.join(FIX, "sacct-unknown.rc.txt"))
    assert slurm_status.parse_sacct(read("sacct-unknown.txt")) == {}
    assert list(slurm_status.parse_sacct(read("sacct-mixed-unknown.txt"))) == [JOBS["held"]]


# --- arrays -------------------------------------------------------------------------------------------

def _counts(squeue_file, sacct_file=None, scontrol_file=None):
    live = slurm_status.parse_squeue(read(squeue_file)) if squeue_file else {}
    ended = slurm_status.parse_sacct(read(sacct_file)) if sacct_file else None
    recs = records(scontrol_file) if scontrol_file else []
    return slurm_status.array_counts(ARR, live, ended, recs)


def test_array_running_first_two_tasks():
    # sacct lists the throttled rest as one row "ID_[2-3%2]": not a task, ignored; squeue -r lists each.
    assert f"{ARR}_[2-3%2]" in slurm_status.parse_sacct(read("sacct-array-running.txt"))
    counts = _counts("squeue-array-running.txt", "sacct-array-running.txt")
    assert counts == {State.RUNNING: 2, State.PENDING: 2}
    assert not JobStatus(State.UNKNOWN, tasks=counts).final


def test_array_second_half_merges_sacct_and_squeue():
    # Tasks 0 and 1 ended (only sacct knows them), 2 and 3 run; squeue wins for a task both list.
    counts = _counts("squeue-array-second-half.txt", "sacct-array-second-half.txt")
    assert counts == {State.COMPLETED: 2, State.RUNNING: 2}


def test_array_ended_one_task_failed():
    assert read("squeue-array-ended.txt") == ""
    counts = _counts("squeue-array-ended.txt", "sacct-array.txt")
    assert counts == {State.COMPLETED: 3, State.FAILED: 1}
    assert JobStatus(State.UNKNOWN, tasks=counts).final
    rows = slurm_status.parse_sacct(read("sacct-array.txt"))
    assert slurm_status.exit_code_of(rows[f"{ARR}_2"][0][1]) == 3


def test_array_from_scontrol_when_sacct_cannot_answer():
    assert _counts(None, None, "scontrol-show-job-array.txt") == {State.COMPLETED: 3, State.FAILED: 1}
    # While running, the pending rest is one record (ArrayTaskId=2-3%2): not counted as a task.
    recs = records("scontrol-show-job-array-running.txt")
    assert sorted(r["ArrayTaskId"] for r in recs) == ["0", "1", "2-3%2"]
    assert _counts(None, None, "scontrol-show-job-array-running.txt") == {State.RUNNING: 2}


def test_array_from_scontrol_while_sacct_lags():
    # slurmdbd has not recorded the ended tasks yet: sacct answers (rc 0) with nothing, or with some
    # of them; the controller's records fill in the rest (seen in CI: an array read as zero tasks).
    assert _counts("squeue-array-ended.txt", "sacct-unknown.txt", "scontrol-show-job-array.txt") == \
        {State.COMPLETED: 3, State.FAILED: 1}
    assert _counts("squeue-array-ended.txt", "sacct-array.txt", "scontrol-show-job-array-running.txt") == \
        {State.COMPLETED: 3, State.FAILED: 1}


def test_array_cancelled_while_tasks_waited_ends():
    # Tasks that never started are only in the cancelled range row: they count, so the array ends
    # (it stayed RUNNING, "4/6 tasks seen", for ever: `hpclaunch tune --resume` waited on it).
    ended = slurm_status.parse_sacct(read("sacct-array-cancelled.txt"))
    counts = slurm_status.array_counts("264", {}, ended, [])
    assert counts == {State.COMPLETED: 2, State.CANCELLED: 4}
    assert JobStatus(State.UNKNOWN, tasks=counts).final
    # a range still pending says nothing of its tasks
    assert slurm_status.array_counts(ARR, {}, slurm_status.parse_sacct(read("sacct-array-running.txt")), []) == \
        {State.RUNNING: 2}


def test_array_counts_ignore_other_jobs():
    assert _counts("squeue-all-early.txt") == {State.RUNNING: 2, State.PENDING: 2}


# --- scontrol show job --------------------------------------------------------------------------------

@pytest.mark.parametrize("name,job,state,code,reason,restarts", [
    ("scontrol-show-job-held.txt", "held", State.PENDING, 0, "JobHeldUser", 0),
    ("scontrol-show-job-running.txt", "running", State.RUNNING, 0, "None", 0),
    ("scontrol-show-job-cancelled.txt", "running", State.CANCELLED, 128 + 15, "None", 0),
    ("scontrol-show-job-completed.txt", "completed", State.COMPLETED, 0, "None", 0),
    ("scontrol-show-job-failed.txt", "failed", State.FAILED, 3, "NonZeroExitCode", 0),
    ("scontrol-show-job-signalled.txt", "signalled", State.FAILED, 128 + 9, "JobLaunchFailure", 0),
    ("scontrol-show-job-timeout.txt", "timeout", State.TIMEOUT, 128 + 15, "TimeLimit", 0),
    ("scontrol-show-job-requeued-pending.txt", "requeued", State.PENDING, 0, "BeginTime", 1),
    ("scontrol-show-job-requeued-running.txt", "requeued", State.RUNNING, 0, "None", 1),
    ("scontrol-show-job-twonode.txt", "twonode", State.RUNNING, 0, "None", 0),
])
def test_scontrol_job(name, job, state, code, reason, restarts):
    (rec,) = records(name)
    assert rec["JobId"] == JOBS[job] and rec["JobName"] == f"fx-{job}"
    st = slurm_status.from_scontrol(rec)
    assert (st.state, st.exit_code, st.reason, st.attempts, st.source) == (state, code, reason, restarts + 1,
                                                                         "scontrol")
    assert rec["WorkDir"] == "/tmp/hpclaunch-record" and rec["Partition"] == "debug"
    # Values that hold `=` stay whole.
    assert rec["TRES"].startswith("cpu=") and "billing=" in rec["TRES"]
    assert all(k[0].isalpha() for k in rec), [k for k in rec if not k[0].isalpha()]


def test_scontrol_job_fields():
    (held,) = records("scontrol-show-job-held.txt")
    assert held["NodeList"] == "" and held["NumNodes"] == "1" and held["StdIn"] == "/dev/null"
    assert held["StdOut"] == f"/tmp/hpclaunch-record/slurm-{JOBS['held']}.out"
    assert held["TRES"] == "cpu=1,mem=100M,node=1,billing=1"
    (two,) = records("scontrol-show-job-twonode.txt")
    assert (two["NodeList"], two["NumNodes"], two["ReqNodeList"]) == ("c[1-2]", "2", "(null)")
    (timeout,) = records("scontrol-show-job-timeout.txt")
    assert slurmcli.parse_time_limit(timeout["TimeLimit"]) == 60
    assert slurmcli.parse_time_limit(held["TimeLimit"]) == 300


def test_scontrol_unknown_job():
    assert read("scontrol-show-job-unknown.rc.txt").strip() == "1"
    assert records("scontrol-show-job-unknown.txt") == []
    assert slurmcli.first_line(read("scontrol-show-job-unknown.stderr.txt")) == \
        "slurm_load_jobs error: Invalid job id specified"


# --- SlurmBackend.statuses, replayed from the recording ------------------------------------------------

def test_statuses_replayed(monkeypatch):
    """The backend's one squeue + one sacct call, answered from squeue-all.txt and sacct-all.txt (the
    rows of the asked ids, as Slurm does), scontrol from the recorded records."""
    asked = []

    def run(cmd, check=True, **kw):
        asked.append(cmd[0])
        ids = set(cmd[cmd.index("-j") + 1].split(","))
        lines = read("squeue-all.txt" if cmd[0] == "squeue" else "sacct-all.txt").splitlines(True)
        text = "".join(line for line in lines if line.split("|")[0].split("_")[0] in ids)
        return subprocess.CompletedProcess(cmd, 0, text, "")

    by_id = {}
    for name in os.listdir(FIX):
        if name.startswith("scontrol-show-job-") and name.endswith(".txt"):
            for rec in records(name):
                by_id.setdefault(rec["JobId"], rec)
    monkeypatch.setattr(slurmcli, "run", run)
    monkeypatch.setattr(slurmcli, "show", lambda kind, name=None, pending=None: [by_id[name]] if name in by_id else [])
    names = ["held", "running", "completed", "failed", "signalled", "timeout", "requeued", "twonode"]
    refs = [JobRef(JOBS[n], "/nowhere") for n in names] + [JobRef(ARR, "/nowhere", array_size=4)]
    got = slurm_backend.SlurmBackend().statuses(refs)
    assert asked == ["squeue", "sacct"]
    assert [(s.state, s.exit_code, s.attempts, s.source) for s in got[:-1]] == [
        (State.PENDING, None, 1, "squeue"), (State.CANCELLED, 0, 1, "sacct"), (State.COMPLETED, 0, 1, "sacct"),
        (State.FAILED, 3, 1, "sacct"), (State.FAILED, 137, 1, "sacct"), (State.TIMEOUT, 0, 1, "sacct"),
        (State.COMPLETED, 0, 2, "sacct"), (State.COMPLETED, 0, 1, "sacct")]
    assert got[-1].tasks == {State.COMPLETED: 3, State.FAILED: 1} and got[-1].final


# --- the cluster: partitions, nodes, config, associations ------------------------------------------

def test_partition_record():
    (part,) = records("scontrol-show-partition.txt")
    assert (part["PartitionName"], part["Default"], part["State"], part["Nodes"]) == ("debug", "YES", "UP", "c[1-2]")
    assert slurmcli.parse_time_limit(part["MaxTime"]) == 3600
    assert slurmcli.parse_time_limit(part["DefaultTime"]) is None       # NONE
    assert part["MaxNodes"] == "UNLIMITED" and part["TotalNodes"] == "2" and part["TotalCPUs"] == "8"
    assert part["TRES"] == "cpu=8,mem=43388M,node=2,billing=8"


@pytest.mark.parametrize("name", ["scontrol-show-node.txt", "scontrol-show-node-busy.txt"])
def test_node_records(name):
    nodes = records(name)
    assert [n["NodeName"] for n in nodes] == ["c1", "c2"]
    for n in nodes:
        assert (n["CPUTot"], n["RealMemory"], n["Gres"], n["Partitions"]) == ("4", "21694", "(null)", "debug")
        assert slurm_preflight.node_gpus(n) == 0
        assert n["CfgTRES"] == "cpu=4,mem=21694M,billing=4"
        assert n["OS"].startswith("Linux ") and " SMP " in n["OS"]   # a value with spaces stays whole
        assert n["State"] in ("IDLE", "MIXED", "ALLOCATED")
    if name == "scontrol-show-node-busy.txt":   # while the 2-node job ran: CPUs in use on both
        assert all(int(n["CPUAlloc"]) >= 1 for n in nodes)


def test_synthetic_gres_nodes():
    """Hand-written after Slurm 22.05's format (the test cluster has no GPUs): see the file's first line."""
    assert read("synthetic-gres-node.txt").startswith("# SYNTHETIC")
    nodes = records("synthetic-gres-node.txt")
    assert [(n["NodeName"], slurm_preflight.node_gpus(n)) for n in nodes] == [("g1", 4), ("g2", 3), ("g3", 2)]
    assert nodes[1]["CfgTRES"].endswith("gres/shard=8") and nodes[2]["State"] == "IDLE+DRAIN"
    assert nodes[2]["Reason"] == "fan replaced [root@2026-11-22T09:00:00]"
    assert slurm_preflight.node_gpus({"Gres": "gpu:a100:2(S:0,2),gpu:1"}) == 3


def test_config():
    conf = slurmcli.parse_config(read("scontrol-show-config.txt"))
    assert conf["ClusterName"] == "hpclaunch"
    assert conf["MaxArraySize"] == "1001"
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["SLURM_VERSION"].startswith("22.05.")
    assert conf["SchedulerParameters"] == "batch_sched_delay=0,sched_interval=2,bf_interval=2,sched_min_interval=0"
    assert conf["MinJobAge"] == "300 sec" and conf["EnforcePartLimits"] == "ALL"
    be = slurm_backend.SlurmBackend()
    be._config = conf
    assert (be.cluster_name(), be.max_array_size(), be.accounting()) == ("hpclaunch", 1001, True)


def test_sinfo():
    lines = read("sinfo.txt").splitlines()
    assert lines[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert lines[1].split()[:4] == ["debug*", "up", "1:00:00", "2"] and lines[1].split()[5] == "c[1-2]"


def test_associations():
    assert slurm_preflight.parse_associations(read("sacctmgr-assoc.txt")) == ({"hpclaunch", "root"}, {"normal"})


# --- sbatch refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name,line", [
    ("sbatch-refused-partition", "sbatch: error: invalid partition specified: nope"),
    ("sbatch-refused-time", "sbatch: error: Batch job submission failed: Requested time limit is invalid "
                            "(missing or exceeds some limit)"),
    ("sbatch-refused-account", "sbatch: error: Batch job submission failed: Invalid account or "
                               "account/partition combination specified"),
])
def test_sbatch_refused(name, line):
    assert read(f"{name}.rc.txt").strip() == "1" and read(f"{name}.txt") == ""
    err = read(f"{name}.stderr.txt")
    assert slurmcli.first_line(err) == line
    assert not slurmcli.is_transient(err)


def test_sbatch_test_only_verdict():
    assert read("sbatch-test-only.txt") == ""
    line = slurmcli.first_line(read("sbatch-test-only.stderr.txt"))
    assert re.fullmatch(r"sbatch: Job \d+ to start at \S+ using 1 processors on nodes c[12] in partition debug", line)


# --- preflight on the recorded partition and nodes ------------------------------------------------------

def _request(tmp_path, extra=""):
    path = tmp_path / "job.yaml"
    path.write_text("name: fx\nprofile: testcluster\ncommand: [python, train.py]\n" + extra)
    return build_plan(resolve_job(str(path))), SourceMap(str(path))


def _with(plan, **changes):
    """The plan with some fields changed (placement's partition, account and qos by name too)."""
    placed = {k: changes.pop(k) for k in ("partition", "account", "qos") if k in changes}
    return replace(plan, placement=replace(plan.placement, **placed), **changes)


def _check(request, sources, assoc=None):
    slurm_preflight.check_request(request, sources, "hpclaunch", records("scontrol-show-partition.txt"),
                                  records("scontrol-show-node.txt"), assoc)


def _problems(request, sources, assoc=None):
    with pytest.raises(InvalidInput) as err:
        _check(request, sources, assoc)
    lines = str(err.value).splitlines()
    assert len(lines) == len(err.value.problems)   # one line each
    return lines


def test_preflight_accepts_a_fitting_request(tmp_path):
    request, sources = _request(tmp_path)
    assert (request.nodes, request.tasks_per_node, request.placement.partition, request.mem) == (2, 2, "debug", "1000M")
    _check(request, sources)
    _check(_with(request, account="hpclaunch", qos="normal"), sources,
           lambda: slurm_preflight.parse_associations(read("sacctmgr-assoc.txt")))


def test_preflight_refuses_too_many_nodes(tmp_path):
    request, sources = _request(tmp_path, "resources: {nodes: 3}\n")
    assert _problems(request, sources) == [
        f"{tmp_path / 'job.yaml'}: resources.nodes: partition 'debug' has 2 node(s) a job can use (3) "
        "\u2014 use at most 2"]


def test_preflight_refuses_too_much_memory(tmp_path):
    request, sources = _request(tmp_path)
    # The profile says 20G a node; a request past the recorded RealMemory=21694 (MB) is refused.
    assert _problems(_with(request, mem="30G"), sources) == [
        f"{tmp_path / 'job.yaml'}: resources.mem: nodes of partition 'debug' have at most 21694 MB ('30G') "
        "\u2014 ask for at most 21694M"]


def test_preflight_refuses_cpus_gpus_time_partition(tmp_path):
    request, sources = _request(tmp_path)
    (cpu,) = _problems(_with(request, cpus_per_task=3), sources)
    assert "resources.cpus_per_task: needs 6 CPUs per node; nodes of partition 'debug' have at most 4" in cpu
    (gpu,) = _problems(_with(request, gpus_per_node=1), sources)
    assert "resources.gpus_per_node: nodes of partition 'debug' have at most 0 GPUs" in gpu
    (time,) = _problems(_with(request, time_s=7200), sources)
    assert "resources.time: over partition 'debug''s MaxTime of 01:00:00" in time
    (part,) = _problems(_with(request, partition="debg"), sources)
    assert "slurm.partition: no such partition on cluster 'hpclaunch'" in part and "did you mean 'debug'?" in part


def test_preflight_refuses_account_and_qos_without_association(tmp_path):
    request, sources = _request(tmp_path)
    assoc = lambda: slurm_preflight.parse_associations(read("sacctmgr-assoc.txt"))  # noqa: E731
    lines = _problems(_with(request, account="nope", qos="high"), sources, assoc)
    assert len(lines) == 2
    assert "slurm.account: you have no association with account 'nope'" in lines[0]
    assert lines[0].endswith("use one of: hpclaunch, root")
    assert "slurm.qos: this QOS is not allowed for you ('high') \u2014 use one of: normal" in lines[1]


def test_statuses_of_a_running_job_that_restarted_read_its_attempts(monkeypatch):
    """A live job with Restarts=1: the same poll asks sacct -D for it (once, with the ended jobs), so
    its status carries the attempt before this one (REQUEUED, with its nodes and times)."""
    asked = []

    def run(cmd, check=True, **kw):
        asked.append(cmd[0])
        name = "squeue-requeued-running.txt" if cmd[0] == "squeue" else "sacct-requeued-running.txt"
        return subprocess.CompletedProcess(cmd, 0, read(name), "")

    monkeypatch.setattr(slurmcli, "run", run)
    monkeypatch.setattr(slurmcli, "show", lambda kind, name=None, pending=None: records(
        "scontrol-show-job-requeued-running.txt"))
    (st,) = slurm_backend.SlurmBackend().statuses([JobRef(JOBS["requeued"], "/nowhere")])
    assert asked == ["squeue", "sacct"]
    assert (st.state, st.attempts, st.source) == (State.RUNNING, 2, "squeue")
    assert [h.state for h in st.history] == [State.REQUEUED, State.RUNNING]
    assert st.history[0].end_time is not None and st.history[1].end_time is None
    assert st.start_time == st.history[1].start_time
