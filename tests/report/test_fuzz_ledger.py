"""Fleet ledger summaries and rows, mutated (issue 44: one summary with huge finite numbers made every
`report --since` fail). A summary is JSON in the registry, which its owner (or a hand edit, or an
older hpclaunch) can fill with anything JSON holds: values replaced with hostile ones (1e308, 10**400,
strings, lists, objects, nothing), elements dropped or added, row fields changed. Whatever they hold,
the fleet view is built and rendered as text, JSON and HTML without a traceback, its JSON has no
NaN/Infinity, a refused summary is a warning naming its job, and the totals count only summaries it
accepted. Derandomized in CI (the same cases every run); HPCLAUNCH_FUZZ_RANDOM=1 explores."""
import copy
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, HostSpec, write_run  # noqa: E402

from hpclaunch.reports.fleet import build_fleet_report, render_fleet  # noqa: E402
from hpclaunch.reports.fleet import SUMMARY_MAX, job_summary  # noqa: E402

CASES = int(os.environ.get("HPCLAUNCH_FUZZ_LEDGER_CASES", "400"))
VALUES = [None, 0, -1, 0.5, 1e308, -1e308, 5.9e28, 10 ** 400, -(10 ** 30), 2 ** 63, True, "x", "", "1e308",
          [], {}, [1, 2], {"power": 1e308}, [[None]], "\u00e9\u0000"]


def _slots(x, out):
    """Every (container, key) inside x, depth first."""
    items = enumerate(x) if isinstance(x, list) else (x.items() if isinstance(x, dict) else ())
    for k, v in items:
        out.append((x, k))
        _slots(v, out)
    return out


def _mutate(rng, summary):
    s = copy.deepcopy(summary)
    for _ in range(rng.randint(1, 4)):
        slots = _slots(s, [])
        if not slots:
            break
        box, key = rng.choice(slots)
        op = rng.randrange(4)
        if op <= 1:
            box[key] = copy.deepcopy(rng.choice(VALUES))
        elif op == 2 and isinstance(box, list):
            del box[key]
        elif op == 3 and isinstance(box, list):
            box.append(copy.deepcopy(rng.choice(VALUES)))
        elif isinstance(box, dict):
            box[rng.choice(["power", "hw_slowdown", "sw_power_cap", "x"])] = copy.deepcopy(rng.choice(VALUES))
    return json.loads(json.dumps(s))  # what the ledger gives back: JSON (big ints stay ints)


def _finite(x):
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return True


def test_mutated_ledger_summaries_never_break_the_fleet_view(tmp_path):
    run = tmp_path / "run"
    write_run(run, [GpuSpec(h, i, ranks=str(i)) for h in ("n1", "n2") for i in range(2)],
              hosts=[HostSpec("n1"), HostSpec("n2")], duration=60, metrics=None)
    base = job_summary(str(run))
    gone = str(tmp_path / "gone")   # a refused summary is read from the logs: here there are none
    seed = random.randrange(1 << 30) if os.environ.get("HPCLAUNCH_FUZZ_RANDOM") else 4321
    rng = random.Random(seed)
    start, bad = time.monotonic(), []
    for case in range(CASES):
        rows = []
        for j in range(4):
            row = {"id": str(j), "name": f"job{j}", "user": f"u{j % 2}", "partition": "gpu", "run_dir": gone,
                   "submit_time": 1.7e9 + j, "summary": _mutate(rng, base) if j % 2 == 0 else copy.deepcopy(base)}
            if rng.random() < 0.2:
                row[rng.choice(["id", "name", "user", "partition", "submit_time"])] = copy.deepcopy(rng.choice(VALUES))
            rows.append(row)
        try:
            fleet = build_fleet_report(rows)
            out = json.loads(render_fleet(fleet, "json"),
                             parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            render_fleet(fleet, "text")
            render_fleet(fleet, "html")
            assert out["jobs_count"] == 4 and _finite(out), out["warnings"]
            assert out["energy_j"] is None or abs(out["energy_j"]) <= 4 * SUMMARY_MAX, out["energy_j"]
        except Exception as e:  # noqa: BLE001 - collected, then reported together
            bad.append(f"case {case} (seed {seed}): {type(e).__name__}: {e}"[:500])
    print(f"\nledger fuzz: {CASES} cases, {len(bad)} failures, {time.monotonic() - start:.0f} s (seed {seed})")
    assert not bad, bad[:5]
