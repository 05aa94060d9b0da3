"""One line of JSON with a job's measured energy, for its Slurm record:

    python -m hpclaunch.reports.slurm_comment RUN_DIR

The job script's epilogue writes it with `scontrol update job=ID AdminComment=...` (as Princeton's
jobstats does), so `sacct -o AdminComment` shows what the job cost beside what Slurm knows.
Exit 1 (nothing printed) when the run directory holds no energy figure.

It runs after every node's monitor stopped, so it also leaves the logs' columnar copies
(reports/columnar.py): the report a user runs once the job ended reads those instead of parsing
every CSV again. (A log written to later, as by a requeued attempt, makes its copy stale: ignored.)
"""
from __future__ import annotations

import json
import sys

from hpclaunch.reports.document import build


def comment(run_dir: str) -> str | None:
    rep = build(run_dir, bins=2, logs_final=True).data
    e = rep["energy_j"]
    if e["total"] is None:
        return None
    temps = [g["max_temp_c"] for g in rep["gpus"] if g["max_temp_c"] is not None]

    def j(v):
        return None if v is None else round(float(v), 1)

    return json.dumps({"hpclaunch": 1, "energy_j": j(e["total"]), "gpu_energy_j": j(e["gpu"]),
                       "cpu_energy_j": j(e["cpu"]), "complete": bool(e["complete"]), "gpus": len(rep["gpus"]),
                       "max_gpu_temp_c": max(temps) if temps else None,
                       "duration_s": j(rep["duration_s"])}, separators=(",", ":"), allow_nan=False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hpclaunch.reports.slurm_comment RUN_DIR", file=sys.stderr)
        return 2
    try:
        text = comment(argv[0])
    except Exception as e:  # noqa: BLE001 - the job's end must not fail for its accounting line
        print(f"hpclaunch: no energy line for Slurm: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if text is None:
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
