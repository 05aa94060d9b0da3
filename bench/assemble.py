#!/usr/bin/env python3
"""docs/benchmarks.md from the sections the benches wrote into docs/bench/*.md; never edited by hand.

    python bench/assemble.py            # write docs/benchmarks.md
    python bench/assemble.py --check    # exit 1 when docs/benchmarks.md is not what the sections give

Each bench writes its own section (``benchlib.Section(...).write(PATH)`` through ``--markdown``).
The page is the introduction below, then every docs/bench/*.md: those named in ORDER first, then any
other in name order, so a new bench's section appears without a change here. A bench that has not
written its section yet is represented by docs/bench/earlier/NAME.md (figures of an earlier session,
marked as such) until it does.
"""
from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = os.path.join(REPO, "docs", "bench")
TARGET = os.path.join(REPO, "docs", "benchmarks.md")
ORDER = ["startup", "submit", "submit_offline", "monitor", "monitor_alerts", "gpu-h100", "report", "fleet",
         "train_overhead", "ddp_teardown", "scale-report", "scale-dashboard", "scale-exporter", "scale-registry",
         "scale-cluster-start"]

INTRO = """# Benchmarks

<!-- Assembled by bench/assemble.py (run by `make bench`) from docs/bench/*.md: edit those, or better
     rerun their bench; an edit here is overwritten and fails tests/test_bench_docs.py. -->

Every figure here comes from a script in `bench/` that prints it and writes its section into
`docs/bench/` (`make bench` runs them all, from a fresh clone, installing each peer tool in a venv of
its own, then assembles this page). The machine is a 2-vCPU VM shared with other work, so each script
compares hpclaunch with its peers **side by side in one run** (interleaved or alternated) and the
ratio is the figure of merit; absolute times move by ±30 % from one minute to the next. Each section
says the commit, the install kind (wheel or editable) and the load average of its run.
"""


def sections() -> list[str]:
    """The section files, in page order (a bench's own section wins over its earlier one)."""
    def names(folder):
        try:
            return {f[:-3] for f in os.listdir(folder) if f.endswith(".md") and not f.startswith(".")}
        except FileNotFoundError:
            return set()

    current, earlier = names(SECTIONS), names(os.path.join(SECTIONS, "earlier"))
    everything = current | earlier
    ordered = [n for n in ORDER if n in everything] + sorted(everything - set(ORDER))
    return [os.path.join(SECTIONS, f"{n}.md") if n in current else os.path.join(SECTIONS, "earlier", f"{n}.md")
            for n in ordered]


def page() -> str:
    parts = [INTRO.strip()]
    for path in sections():
        with open(path, encoding="utf-8") as f:
            parts.append(f.read().strip())
    return "\n\n".join(parts) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    text = page()
    if args.check:
        try:
            with open(TARGET, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"{TARGET} is not what docs/bench/*.md assemble to: run `python bench/assemble.py`", file=sys.stderr)
            return 1
        return 0
    tmp = TARGET + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, TARGET)
    print(f"{os.path.relpath(TARGET, REPO)}: {len(sections())} sections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
