"""Issue 49 on the real Slurm test cluster (CPU, gloo, 2 nodes x 2 ranks): ZeRO-3 trains as DDP does
with about a quarter of the state per rank (and the report shows it), its sharded checkpoint
resumes at world size 2 and back at 4 as if uninterrupted, a requeue through the batch shell's
signal resumes it, and `hpclaunch export` assembles it for ONNX Runtime.

Small on purpose (the cluster's nodes are shared): the tiny transformer, 100 steps."""
import glob
import json
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file
from zero_oracle import assembled_logits

pytestmark = pytest.mark.cluster

STEPS = 100
# the same optimizer steps at world size 4 and 2: a fixed global batch, no LR scaling, no dropout
TRAIN = ["--data", "digits", "--model", "transformer", "--size", "tiny", "--epochs", "10", "--max-steps", str(STEPS),
         "--global-batch", "128", "--batch-size", "32", "--lr-scaling", "none", "--dropout", "0", "--log-every", "1",
         "--precision", "fp32", "--no-tensorboard", "--no-mlflow", "--quiet"]  # the profile says bf16


def job(tmp_path, name, args, nodes=2, tasks=2, extra="", file=None):
    command = json.dumps([sys.executable, "-m", "hpclaunch.train_entry", *map(str, args)])
    return job_file(tmp_path, f"""
name: {name}
profile: testcluster
launcher: torchrun
command: {command}
resources: {{nodes: {nodes}, tasks_per_node: {tasks}, cpus_per_task: 1, time: "00:10:00"}}
monitor: {{interval: 1.0}}
env: {{OMP_NUM_THREADS: "1"}}
{extra}""", name=file or f"{name}.yaml")


def submit(tmp_path, path, timeout=900):
    proc = hl("submit", path, "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=timeout)
    run_dir = [ln.split(": ", 1)[1].strip() for ln in proc.stdout.splitlines() if "run directory" in ln][0]
    return proc, json.loads(hl("status", run_dir, "--json", cwd="/").stdout)


def records(run_dir, kind):
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "metrics", "rank*.jsonl"))):
        with open(path) as f:
            out += [r for r in map(json.loads, (ln for ln in f if ln.endswith("\n"))) if r["kind"] == kind]
    return out


def losses(run_dir):
    sums = {}
    for r in records(run_dir, "step"):
        s = sums.setdefault(r["step"], [0.0, 0])
        s[0] += r["loss"] * r["samples"]
        s[1] += r["samples"]
    return {k: a / n for k, (a, n) in sums.items()}


def val_accuracy(run_dir):
    return [r for r in records(run_dir, "epoch") if r["rank"] == 0][-1]["val_accuracy"]


@pytest.fixture(scope="module")
def pair(slurm, tmp_path_factory):
    """DDP and ZeRO-3, same seed and settings, 2 nodes x 2 ranks, one after the other."""
    tmp = tmp_path_factory.mktemp("zero-pair")
    os.environ["HPCLAUNCH_HOME"] = str(tmp / "home")
    out = {}
    for stage in (0, 3):
        proc, st = submit(tmp, job(tmp, f"zero{stage}-pair", TRAIN + ["--zero", stage]))
        assert st["state"] == "COMPLETED", (proc.stdout, proc.stderr, st)
        out[stage] = st["run_dir"]
    return out


def test_zero3_trains_as_ddp_with_a_quarter_of_the_state_per_rank(pair):
    ddp, z3 = losses(pair[0]), losses(pair[3])
    assert sorted(ddp) == sorted(z3) == list(range(1, STEPS + 1))
    assert abs(ddp[STEPS] - z3[STEPS]) < 1e-3, (ddp[STEPS], z3[STEPS])
    assert abs(val_accuracy(pair[0]) - val_accuracy(pair[3])) <= 0.005
    headers = {r["rank"]: r for r in records(pair[3], "header")}
    assert sorted(headers) == [0, 1, 2, 3] and {h["host"] for h in headers.values()} == {"c1", "c2"}
    # what each rank holds, from the tensors (memory records) and as the report shows it
    reports = {s: {r["rank"]: r["memory"] for r in json.loads(hl("report", pair[s], "--format", "json").stdout)["ranks"]}
               for s in (0, 3)}
    assert sorted(reports[3]) == [0, 1, 2, 3]
    whole = max(m["state_mib"] for m in reports[0].values())
    for rank, mem in reports[3].items():
        assert mem["state_mib"] <= 0.35 * whole, (rank, mem, whole)
    held = {r["rank"]: r for r in records(pair[3], "memory") if r["step"] == 1}
    ddp_held = [r for r in records(pair[0], "memory") if r["step"] == 1][0]
    assert max(r["state_bytes"] for r in held.values()) <= 0.35 * ddp_held["state_bytes"]
    print(f"\nZeRO-3 vs DDP, 2x2 ranks: loss at step {STEPS} {z3[STEPS]:.6f} vs {ddp[STEPS]:.6f}; "
          f"val accuracy {val_accuracy(pair[3]):.4f} vs {val_accuracy(pair[0]):.4f}; state per rank "
          f"{max(r['state_bytes'] for r in held.values())} vs {ddp_held['state_bytes']} bytes "
          f"({max(r['state_bytes'] for r in held.values()) / ddp_held['state_bytes']:.3f})")
    text = hl("report", pair[3]).stdout
    assert "Memory per rank" in text


def test_save_at_four_resume_at_two_and_back(pair, tmp_path):
    """One run directory, three jobs: ZeRO-3 at 2x2 stops at step 40 (the requeue exit, not
    requeued), goes on at 1x2 to step 70, and finishes at 2x2: every step's loss within 1e-5 of
    the uninterrupted 2x2 run's."""
    os.environ["HPCLAUNCH_HOME"] = str(tmp_path / "home")
    run_dir = tmp_path / "hops"
    args = TRAIN + ["--zero", 3, "--run-dir", run_dir]
    once = "requeue: {max_attempts: 1}"   # a stop is not requeued: the next job goes on at another size
    for i, (nodes, tasks, stop) in enumerate([(2, 2, 40), (1, 2, 70), (2, 2, None)]):
        more = ["--stop-after-step", stop] if stop else []
        proc, st = submit(tmp_path, job(tmp_path, f"hop{i}", args + more, nodes, tasks, once))
        if stop:   # the requeue exit: its checkpoint published, the marker written
            marker = json.load(open(run_dir / ".hpclaunch" / "requeue-exit.attempt0"))
            assert marker["step"] == stop and os.path.isdir(run_dir / "checkpoints" / f"step-{stop}"), (marker, st)
        else:
            assert st["state"] == "COMPLETED", (proc.stdout, proc.stderr, st)
    worlds = [h["world_size"] for h in records(run_dir, "header") if h["rank"] == 0]
    assert worlds == [4, 2, 4], worlds
    whole, hops = losses(pair[3]), losses(run_dir)
    assert sorted(hops) == list(range(1, STEPS + 1))
    worst = max(abs(whole[k] - hops[k]) for k in whole)
    assert worst < 1e-5, worst
    assert abs(val_accuracy(pair[3]) - val_accuracy(run_dir)) < 1e-9
    print(f"\nZeRO-3 4 -> 2 -> 4 ranks vs uninterrupted: largest loss difference {worst:.2e} over {STEPS} steps")


def test_a_zero3_job_requeued_by_the_batch_shells_signal_resumes(slurm, tmp_path):
    """requeue.signal USR1, delivered to the batch shell as Slurm's --signal=B: does (scancel --batch):
    the shell raises the flag, every rank checkpoints its shard at the same step and exits 75,
    hpclaunch requeues, and the next attempt resumes from the sharded checkpoint and finishes."""
    os.environ["HPCLAUNCH_HOME"] = str(tmp_path / "home")
    steps = 330
    args = [a if a != str(STEPS) else str(steps) for a in TRAIN] + ["--zero", 3, "--epochs", 30]
    path = job(tmp_path, "zero3-requeue", args, extra="requeue: {max_attempts: 3, signal: USR1, grace: 120}")
    proc = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", path, "--backend", "slurm", "--wait"],
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_dir, deadline = None, time.time() + 300
        while time.time() < deadline and run_dir is None:
            st = json.loads(hl("status", "zero3-requeue", "--json", cwd="/", check=False).stdout or "{}")
            run_dir = st.get("run_dir") if st.get("job_id") else None
            time.sleep(1)
        assert run_dir, "the job never started"
        while time.time() < deadline and len([r for r in records(run_dir, "step") if r["rank"] == 0]) < 30:
            time.sleep(0.5)
        subprocess.run(["scancel", "--batch", "--signal=USR1", str(st["job_id"])], check=True)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    st = json.loads(hl("status", run_dir, "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["attempts"] >= 2, (out, err, st)
    marker = json.load(open(os.path.join(run_dir, ".hpclaunch", "requeue-exit.attempt0")))
    ck = os.path.join(run_dir, "checkpoints")
    headers = [h for h in records(run_dir, "header") if h["rank"] == 0]
    assert headers[1]["resumed_step"] == marker["step"] > 0, (headers[1], marker)
    got = losses(run_dir)
    assert sorted(got) == list(range(1, steps + 1))          # every step once, none lost or repeated
    finished = json.load(open(os.path.join(run_dir, ".hpclaunch", "finished")))
    assert finished["step"] == steps
    assert any(n.startswith("shard-") for n in os.listdir(os.path.join(ck, f"step-{steps}")))
    assert "SIGUSR1" in open(os.path.join(run_dir, "logs", "slurm.out")).read()


def test_export_of_the_zero3_run_agrees_with_onnxruntime(pair, require):
    import numpy as np

    from hpclaunch.train_entry.export import missing_packages

    require(", ".join(missing_packages()) or None, "the ZeRO-3 export")
    hl("export", pair[3])
    desc = json.load(open(os.path.join(pair[3], "exports", "model.json")))
    assert desc["check"]["max_abs_diff"] < 1e-4 and desc["step"] == STEPS
    import onnxruntime as ort

    from hpclaunch.train_entry.data import load_data, split

    data = load_data("digits", "label")
    _, va = split(len(data.labels), 0.2, 0)
    x = data.features[va]
    got = ort.InferenceSession(os.path.join(pair[3], "exports", "model.onnx"),
                               providers=["CPUExecutionProvider"]).run(None, {"features": x})[0]
    want = assembled_logits(os.path.join(pair[3], "checkpoints", f"step-{STEPS}"), x)
    assert np.abs(got - want).max() < 1e-4 and (got.argmax(1) == want.argmax(1)).all()
    accuracy = float((got.argmax(1) == data.labels[va]).mean())
    assert abs(accuracy - val_accuracy(pair[3])) <= 1 / len(va) + 1e-9, accuracy   # a near-tie row at most
