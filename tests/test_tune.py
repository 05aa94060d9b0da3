"""`hpclaunch tune` (issue 48, docs/tune.md) without the cluster: what validate refuses, the values a
trial reports, the helper, the search space, the script of a study, and whole studies on the local
backend (a failing trial recorded with its error, pruned trials stopped, the report's JSON and
HTML). The Slurm side: tests/test_tune_cluster.py."""
import json
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file

from hpclaunch.tune import PRUNED_ENV, REPORT_ENV, Pruned, report
from hpclaunch.tune.space import distributions, grid, point
from hpclaunch.tune.values import TrialValues

pytest.importorskip("optuna")

BASE = """\
name: {name}
command: [python3, prog.py, "{{x}}"]
launcher: srun
resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
sweep:
{sweep}
"""


def study_job(tmp_path, sweep: str, name: str = "st", command=None) -> str:
    text = BASE.format(name=name, sweep="".join("  " + line + "\n" for line in sweep.strip().splitlines()))
    if command:
        text = text.replace('[python3, prog.py, "{x}"]', command)
    return job_file(tmp_path, text)


@pytest.mark.parametrize("sweep,needle", [
    ("method: tpe\nparameters: {x: [1, 2]}", "sweep.method: tpe learns from the trials' results"),
    ("trials: 4\nparameters: {x: [1, 2]}", "sweep.trials: is a study's number of trials"),
    ("prune: {method: median}\nparameters: {x: [1, 2]}", "sweep.prune: is a study's early stopping"),
    ("metric: v\nmethod: tpe\ntrials: 4\nparameters: {}", "sweep.parameters: is empty: a study has nothing"),
    ("metric: v\nmethod: tpe\nparameters: {x: [1, 2]}", "sweep.trials: a tpe study needs a number of trials"),
    ("metric: v\nmethod: grid\ntrials: 5\nparameters: {x: [1, 2]}", "asks for more trials than the grid has points"),
    ("metric: v\nmethod: grid\nparameters: {x: {range: [0, 20000]}}", "the grid has 20000 points"),
    ("metric: v\nmethod: tpe\ntrials: 4\nparameters: {x: {range: [0, 1000, 1]}, y: [1, 1]}",
     "sweep.parameters.y: lists a value twice"),
    ("metric: v\nmethod: tpe\ntrials: 4\nparameters: {x: {uniform: [2, 1]}}", "uniform takes [low, high] with low < high"),
    ("metric: v\nmethod: tpe\ntrials: 4\nparameters: {x: {loguniform: [0, 1]}}", "loguniform needs low > 0"),
    ("metric: v\nmethod: random\nsamples: 4\nparameters: {x: [1, 2]}", "sweep.samples: is for a plain random sweep"),
    ("metric: 'v al'\nmethod: tpe\ntrials: 4\nparameters: {x: [1, 2]}", "sweep.metric: is not a metric name"),
])
def test_validate_refuses_a_bad_study_in_one_line(tmp_path, sweep, needle):
    job = study_job(tmp_path, sweep, command='[python3, prog.py, "{x}", "{y}"]' if "y:" in sweep else None)
    proc = hl("validate", job, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_validate_refuses_a_huge_choice_and_a_metric_train_entry_never_writes(tmp_path):
    values = ", ".join(str(i) for i in range(1001))
    proc = hl("validate", study_job(tmp_path, f"metric: v\nmethod: tpe\ntrials: 4\nparameters: {{x: [{values}]}}"),
              check=False)
    assert proc.returncode == 2 and "lists 1001 values; a study searches at most 1000" in proc.stderr, proc.stderr
    job = study_job(tmp_path, "metric: val_acc\nmethod: tpe\ntrials: 4\nparameters: {train.lr: {loguniform: [1.0e-4, 1.0e-1]}}",
                    command="[python3, -m, hpclaunch.train_entry, --data, digits]")
    proc = hl("validate", job, check=False)
    assert proc.returncode == 2 and "sweep.metric: is not one of train_entry's epoch metrics" in proc.stderr
    assert "use val_accuracy" in proc.stderr


def test_a_study_validates_and_renders_as_an_array_of_agent_tasks(tmp_path):
    job = study_job(tmp_path, "metric: v\nmethod: tpe\ntrials: 40\nparallelism: 4\nparameters: {x: {uniform: [0, 1]}}")
    assert hl("validate", job).returncode == 0
    script = hl("render", job).stdout
    assert "#SBATCH --array=0-39%4" in script
    # the program is the agent's argument, never shell text; {x} is filled in by the agent
    assert "-m hpclaunch.tune.agent" in script and "prog.py '{x}'" in script
    assert "case $hl_task in" not in script  # no fixed points


def test_a_plain_sweep_is_unchanged(tmp_path):
    job = job_file(tmp_path, 'name: p\ncommand: [echo, "{x}"]\nsweep: {parameters: {x: [1, 2, 3]}, parallelism: 2}\n')
    script = hl("render", job).stdout
    assert "#SBATCH --array=0-2%2" in script and "case $hl_task in" in script and "hpclaunch.tune" not in script


def test_the_space_is_optunas_and_values_reach_the_command_as_a_sweeps_text():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    d = distributions({"a": [16, 32], "b": {"range": [10, 0, -2]}, "c": {"loguniform": [1e-4, 1e-1]},
                       "d": {"uniform": [0, 1]}, "e": {"choice": ["x", "y"]}})
    assert d["a"] == CategoricalDistribution([16, 32]) and d["e"] == CategoricalDistribution(["x", "y"])
    assert d["b"] == IntDistribution(2, 10, step=2)  # range(10, 0, -2): 10, 8, ..., 2
    assert d["c"] == FloatDistribution(1e-4, 1e-1, log=True) and d["d"] == FloatDistribution(0.0, 1.0)
    assert grid({"a": {"range": [0, 3]}, "b": [True, False]}) == {"a": [0, 1, 2], "b": [True, False]}
    assert point({"lr": 0.001, "flag": True, "n": 3}) == {"lr": "0.001", "flag": "true", "n": "3"}


def test_values_follow_train_entry_epochs_and_report_lines(tmp_path):
    (tmp_path / "metrics").mkdir()
    metrics = tmp_path / "metrics" / "rank0.jsonl"
    lines = tmp_path / "metrics" / "tune.jsonl"
    v = TrialValues(str(tmp_path), "val_accuracy")
    metrics.write_text('{"kind":"header","schema":"hpclaunch.metrics/1"}\n'
                       '{"kind":"step","step":10,"loss":2.0}\n'
                       '{"kind":"epoch","epoch":0,"step":12,"val_accuracy":0.5}\n'
                       '{"kind":"epoch","epoch":1,"step":24,"val_acc')  # the last line is not written whole yet
    assert v.new() == [(0, 0.5)] and v.steps == 12
    with open(metrics, "a") as f:
        f.write('uracy":0.75}\n')
    lines.write_text('{"step": 30, "value": 0.9}\nnot json\n{"step": -1, "value": 1}\n{"step": 31, "val_accuracy": NaN}\n')
    assert v.new() == [(1, 0.75), (30, 0.9)] and v.steps == 30 and v.last == (30, 0.9)
    assert v.new() == []


def test_the_helper_appends_a_line_and_raises_once_pruned(tmp_path, monkeypatch):
    report(1, 0.5)  # outside a study: nothing, no error
    path, marker = tmp_path / "tune.jsonl", tmp_path / "pruned"
    monkeypatch.setenv(REPORT_ENV, str(path))
    monkeypatch.setenv(PRUNED_ENV, str(marker))
    report(1, 0.5)
    report(2, float("nan"))
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"step": 1, "value": 0.5},
                                                                     {"step": 2, "value": None}]
    marker.write_text("{}\n")
    with pytest.raises(Pruned) as e:
        report(3, 0.1)
    assert e.value.code == 0 and isinstance(e.value, SystemExit)


def test_the_helper_imports_no_optuna():
    code = "import sys, hpclaunch.tune; hpclaunch.tune.report(1, 2.0); print('optuna' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


# --- whole studies on the local backend ---------------------------------------------------------

PROGRAM = """\
import os, sys, time
from hpclaunch.tune import report
trial = int(os.environ["HPCLAUNCH_TUNE_TRIAL"])
if trial == 1:
    sys.exit(3)                      # a failing trial: recorded, the study goes on
for step in range(20):
    report(step, 1.0 if trial == 0 else 0.1)   # trials after the first fall behind: pruned
    time.sleep(0.3)
"""


def test_a_local_study_records_failures_prunes_and_reports(hpc_home, tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    job = study_job(tmp_path, "metric: v\nmethod: random\ntrials: 4\nparallelism: 1\n"
                    "prune: {method: median, warmup_steps: 1, startup_trials: 1}\nparameters: {x: {uniform: [0, 1]}}")
    proc = hl("tune", job, "--backend", "local", cwd=str(tmp_path), check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trial   1 failed" in proc.stdout and "(exit code 3)" in proc.stdout, proc.stdout
    doc = json.loads(hl("tune", "report", "st", "--format", "json").stdout)
    states = {t["number"]: t["state"] for t in doc["trials"]}
    assert states == {0: "complete", 1: "failed", 2: "pruned", 3: "pruned"}, doc["trials"]
    by = {t["number"]: t for t in doc["trials"]}
    assert by[0]["steps"] == 19 and by[0]["value"] == 1.0
    assert by[1]["error"] == "exit code 3"
    for n in (2, 3):  # stopped soon after step 1, not run to the end
        assert 1 <= by[n]["steps"] < 10, by[n]
        assert os.path.exists(os.path.join(by[n]["run_dir"], ".hpclaunch", "pruned"))
    assert doc["best"]["number"] == 0 and "name: st-best" in doc["best"]["job_file"]
    assert doc["counts"]["pruned"] == 2 and doc["finished"] == 4
    # the pruned tasks ended cleanly (exit 0), the failed one with its code
    st = json.loads(hl("status", doc["jobs"][0]["job_id"], "--json").stdout)
    assert st["tasks"] == {"COMPLETED": 3, "FAILED": 1}, st
    page = hl("tune", "report", "st", "--output", str(tmp_path / "st.html")).stderr
    html = (tmp_path / "st.html").read_text()
    assert "report written" in page and "plotly" in html and "Optimization History" in html
    assert "Parallel Coordinate" not in html  # one complete trial: no coordinates to draw
    # the best trial's job file is a job file
    (tmp_path / "best.yaml").write_text(doc["best"]["job_file"])
    assert hl("validate", str(tmp_path / "best.yaml")).returncode == 0


def test_submit_of_a_study_starts_it_and_a_second_start_is_refused(hpc_home, tmp_path):
    (tmp_path / "prog.py").write_text("from hpclaunch.tune import report\nreport(0, 1.0)\n")
    job = study_job(tmp_path, "metric: v\nmethod: grid\nparameters: {x: [1, 2]}", name="sub")
    out = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    assert out["study"] == "sub" and out["trials"] == 2 and out["tasks"] == 2
    proc = hl("tune", job, "--backend", "local", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "study 'sub' exists" in proc.stderr and "--resume" in proc.stderr
    proc = hl("tune", job, "--resume", "-o", "sweep.metric=w", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "changes the study's sweep.metric" in proc.stderr
    deadline = time.time() + 120
    while json.loads(hl("status", out["job_id"], "--json").stdout)["state"] not in ("COMPLETED", "FAILED"):
        assert time.time() < deadline
        time.sleep(1)
    doc = json.loads(hl("tune", "status", "sub", "--json").stdout)
    assert sorted(t["params"]["x"] for t in doc["trials"]) == [1, 2] and doc["counts"]["complete"] == 2
    proc = hl("tune", job, "--resume", "--backend", "local", cwd=str(tmp_path))
    assert "nothing left to run" in proc.stdout


SLOW = """\
import os, signal, sys, time
from hpclaunch.tune import report
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a program that ignores SIGTERM: only SIGKILL ends it
for step in range(120 if os.path.exists("first") else 3):  # the first job's run on past the cancel
    time.sleep(0.5)
    report(step, float(sys.argv[1]))
"""


def _programs_in(folder):
    """The prog.py processes running in `folder` (the job's working directory)."""
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if "prog.py" in (p.info["cmdline"] or []) and (p.info["cwd"] or "").startswith(str(folder)):
            out.append(p)
    return out


def test_a_local_study_cancelled_mid_way_resumes_to_its_trials_none_twice(hpc_home, tmp_path):
    (tmp_path / "prog.py").write_text(SLOW)
    (tmp_path / "first").write_text("")
    job = study_job(tmp_path, "metric: v\nmethod: random\ntrials: 4\nparallelism: 2\nparameters: {x: {uniform: [0, 1]}}",
                    name="res")
    start = json.loads(hl("tune", job, "--backend", "local", "--detach", "--json", cwd=str(tmp_path)).stdout)
    deadline = time.time() + 120
    while json.loads(hl("tune", "status", "res", "--json").stdout)["counts"]["running"] < 2:
        assert time.time() < deadline
        time.sleep(0.5)
    hl("cancel", start["job_id"])
    deadline = time.time() + 60
    while json.loads(hl("status", start["job_id"], "--json").stdout)["state"] != "CANCELLED":
        assert time.time() < deadline
        time.sleep(0.5)
    # the cancel reached the programs, even these (they stay in the task's process group, which the
    # local backend ends with SIGKILL): none runs on
    assert _programs_in(tmp_path) == []
    doc = json.loads(hl("tune", "status", "res", "--json").stdout)
    assert doc["counts"]["interrupted"] == 2, doc["counts"]  # no job active: the running ones were cut off
    (tmp_path / "first").unlink()
    proc = hl("tune", job, "--resume", "--backend", "local", cwd=str(tmp_path), timeout=300)
    assert "were interrupted: their points run again" in proc.stdout
    doc = json.loads(hl("tune", "report", "res", "--format", "json").stdout)
    ended = [t for t in doc["trials"] if t["state"] == "complete"]
    cut = [t for t in doc["trials"] if t["state"] == "interrupted"]
    assert len(ended) == 4 and len(cut) == 2 and len({t["run_dir"] for t in ended}) == 4
    for t in cut:  # each point cut off ran again, once
        assert [e["params"] for e in ended].count(t["params"]) == 1
    assert [j["tasks"] for j in doc["jobs"]] == [4, 4 - sum(1 for e in ended if e["job_id"] == start["job_id"])]
