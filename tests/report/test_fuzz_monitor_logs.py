"""Monitor logs, mutated (issue 15: the fuzz covers monitor logs too): cells replaced with hostile
values, rows cut, duplicated, shuffled or joined, bytes flipped, a byte-order mark or a header naming
a column twice (issue 44). Whatever the logs hold, the report is built and rendered as text, JSON and
HTML without a traceback, its JSON has no NaN/Infinity, and its duration stays within the run's
window: the job record's, or, for every other case, with no record at all (logs copied off a cluster),
the plausible times' (issue 44). Derandomized in CI (the same cases every run);
HPCLAUNCH_FUZZ_RANDOM=1 explores."""
import json
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import T0, GpuSpec, HostSpec, write_run  # noqa: E402

from hpclaunch.reports import build_report, render  # noqa: E402
from hpclaunch.reports.plausible import EPOCH_FLOOR, FUTURE_SLACK_S  # noqa: E402

CASES = int(os.environ.get("HPCLAUNCH_FUZZ_LOG_CASES", "300"))
VALUES = ["", "nan", "NaN", "inf", "-inf", "Infinity", "-5", "0", "1e308", "-1e308", "1e18", "9" * 400, "x",
          "GPU-\u00e9", "\x00", "1,2", '"', "0x10", " 12 ", "-0", "17954661795466094.922", str(T0 + 3e8)]


def _mutate(rng, text):
    lines = text.splitlines(keepends=True)
    body = [i for i, line in enumerate(lines) if line[:1].isdigit()]
    head = [i for i, line in enumerate(lines) if line.startswith("time_unix")]
    for _ in range(rng.randint(1, 6)):
        if not body:
            break
        i = rng.choice(body)
        op = rng.randrange(8)
        if op == 6:  # a byte-order mark before the schema line
            lines[0] = "\ufeff" + lines[0].lstrip("\ufeff")
            continue
        if op == 7 and head:  # a header naming a column twice
            names = lines[head[0]].rstrip("\n").split(",")
            names[rng.randrange(len(names))] = rng.choice(names)
            lines[head[0]] = ",".join(names) + "\n"
            continue
        if op == 0:  # a hostile cell
            cells = lines[i].rstrip("\n").split(",")
            cells[rng.randrange(len(cells))] = rng.choice(VALUES)
            lines[i] = ",".join(cells) + "\n"
        elif op == 1:  # a torn row
            lines[i] = lines[i][: rng.randrange(len(lines[i]))]
        elif op == 2:  # duplicated
            lines.insert(i, lines[i])
        elif op == 3:  # two rows run together (a short write finished by the next)
            lines[i] = lines[i].rstrip("\n")
        elif op == 4:  # a flipped byte
            b = bytearray(lines[i].encode())
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(7)
            lines[i] = b.decode("utf-8", "replace")
        else:  # shuffled
            j = rng.choice(body)
            lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


def test_mutated_monitor_logs_never_break_the_report(tmp_path):
    base = tmp_path / "base"
    write_run(base, [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1")], hosts=[HostSpec("n1")],
              duration=60, jitter=0.2, metrics=None)
    (base / ".hpclaunch").mkdir(exist_ok=True)
    (base / ".hpclaunch" / "state").write_text(f"{int(T0)} attempt=0 start\n{int(T0) + 61} attempt=0 end rc=0\n")
    seed = random.randrange(1 << 30) if os.environ.get("HPCLAUNCH_FUZZ_RANDOM") else 1234
    rng = random.Random(seed)
    logs = sorted(p.name for p in (base / "monitor").iterdir() if p.suffix == ".csv")
    start, bad = time.monotonic(), []
    # without the record, the window is the plausible times' (reports/plausible.py)
    plausible_s = time.time() + FUTURE_SLACK_S - EPOCH_FLOOR
    for case in range(CASES):
        rd = tmp_path / f"c{case % 4}"
        shutil.rmtree(rd, ignore_errors=True)
        shutil.copytree(base, rd)
        record = case % 2 == 0
        if not record:
            shutil.rmtree(rd / ".hpclaunch")
        for name in rng.sample(logs, rng.randint(1, len(logs))):
            path = rd / "monitor" / name
            path.write_text(_mutate(rng, path.read_text()), errors="replace")
        try:
            rep = build_report(rd)
            out = json.loads(render(rep, "json"), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            render(rep, "text")
            render(rep, "html")
            d = out["duration_s"]
            assert d is None or 0 <= d <= (61 + 600 if record else plausible_s), d
        except Exception as e:  # noqa: BLE001 - collected, then reported together
            bad.append(f"case {case} (seed {seed}): {type(e).__name__}: {e}")
    print(f"\nmonitor-log fuzz: {CASES} cases, {len(bad)} failures, {time.monotonic() - start:.0f} s (seed {seed})")
    assert not bad, bad[:5]
