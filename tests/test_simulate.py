"""The failure simulator (hpclaunch/runtime/simulate.py): seeded, its times add up, exact without
failures, and the adaptive cadence near the best fixed interval in hindsight."""
import json
import math
import random
import subprocess
import sys

import pytest

from hpclaunch.runtime import cadence
from hpclaunch.runtime.simulate import Shape, best_fixed, expected, run


def test_seeded_and_its_times_add_up_to_the_elapsed_time():
    shape = Shape(work=36000, nodes=8, mtbf_node_s=8 * 3600, cost=20, detect=10, restart=40, requeue=120,
                  spares=1, start=30, end=5)
    a = expected(shape, ("fixed", 600), runs=50, seed=7)
    assert a == expected(shape, ("fixed", 600), runs=50, seed=7)
    assert a != expected(shape, ("fixed", 600), runs=50, seed=8)
    for seed in range(20):
        r = run(shape, ("adaptive",), random.Random(seed))
        assert sum(r["seconds"].values()) == pytest.approx(r["elapsed"])
        assert r["seconds"]["productive"] == pytest.approx(36000)      # the first pass over each second
        assert r["seconds"]["queued"] == pytest.approx(120 * max(0, r["failures"] - 1))   # one spare


def test_without_failures_the_ettr_is_exact():
    shape = Shape(work=10000, nodes=1, mtbf_node_s=1e15, cost=7, start=20, end=3)
    r = run(shape, ("fixed", 300), random.Random(0))
    saves = math.ceil(10000 / 300) - 1             # none after the last segment
    assert r["failures"] == 0 and r["elapsed"] == pytest.approx(20 + 10000 + saves * 7 + 3)
    assert r["seconds"]["checkpointing"] == pytest.approx(saves * 7)


def test_every_n_steps_is_a_fixed_interval():
    shape = Shape(work=20000, nodes=4, mtbf_node_s=4 * 3600, cost=30)
    assert expected(shape, ("steps", 500, 1.5), 30, 3) == expected(shape, ("fixed", 750), 30, 3)


@pytest.mark.parametrize("mtbf_h,cost", [(0.5, 60), (4, 5), (24, 600)])
def test_the_adaptive_cadence_is_near_the_best_fixed_interval(mtbf_h, cost):
    shape = Shape(work=72 * 3600, nodes=16, mtbf_node_s=16 * mtbf_h * 3600, cost=cost, detect=10, restart=60)
    tau, best = best_fixed(shape, runs=100, seed=1)
    adaptive = expected(shape, ("adaptive",), runs=100, seed=1)
    assert adaptive["ettr"] >= 0.98 * best["ettr"], (tau, best, adaptive)
    # and Young's interval is what the best is near
    assert 0.25 < tau / cadence.young(cost, shape.job_mtbf_s) < 4


def test_the_command():
    out = subprocess.run([sys.executable, "-m", "hpclaunch.runtime.simulate", "--work", "3600", "--nodes", "2",
                          "--mtbf-node-h", "2", "--cost", "10", "--policy", "fixed:120", "--runs", "20"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["policy"] == ["fixed", 120.0] and 0 < doc["ettr"] < 1
    bad = subprocess.run([sys.executable, "-m", "hpclaunch.runtime.simulate", "--work", "1", "--mtbf-node-h", "1",
                          "--cost", "1", "--policy", "sometimes"], capture_output=True, text=True)
    assert bad.returncode == 2 and "use fixed:SECONDS" in bad.stderr


class Scripted:
    """Failures at the given gaps (seconds after the job, or the restart, is up), then none."""

    def __init__(self, *gaps):
        self.gaps = list(gaps)

    def expovariate(self, _lam):
        return self.gaps.pop(0) if self.gaps else 1e12


def test_a_failure_before_the_last_save_is_committed_resumes_from_the_one_before():
    # saves end at 11, 22, ...; the failure comes 0.5 s into the second segment (t = 11.5)
    shape = dict(work=100, nodes=1, mtbf_node_s=1e6, cost=1, detect=2, restart=3)
    plain = run(Shape(**shape), ("fixed", 10), Scripted(11.5))
    late = run(Shape(**shape, commit=1.0), ("fixed", 10), Scripted(11.5))
    assert plain["seconds"]["recomputing"] == pytest.approx(0.5)         # only the half second since the save
    assert late["seconds"]["recomputing"] == pytest.approx(10.5)         # the save at 11 was not committed
    assert late["elapsed"] - plain["elapsed"] == pytest.approx(10 + 1)   # the segment and its save again
    # a failure after the commit loses what it would without one
    assert run(Shape(**shape, commit=1.0), ("fixed", 10), Scripted(12.5))["seconds"]["recomputing"] == \
        pytest.approx(1.5)
