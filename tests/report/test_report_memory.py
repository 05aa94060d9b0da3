"""The report's per-rank memory view (issue 49): what each rank holds of parameters, gradients and
optimizer state (train_entry's memory records: ZeRO's saving), its peaks, and for a GPU of its own
the monitor's memory use; both metrics readers (pyarrow and the json module) agree."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, write_metrics, write_run  # noqa: E402

from hlcli import hl  # noqa: E402
from hpclaunch.reports import metrics_log, readers  # noqa: E402

MIB = 1 << 20


def add_memory(run_dir, rank, records):
    with open(os.path.join(run_dir, "metrics", f"rank{rank}.jsonl"), "a") as f:
        f.write("\n")   # write_metrics leaves a cut last line: close it (an unparsable line, skipped)
        for rec in records:
            f.write(json.dumps({"kind": "memory", "rank": rank, **rec}) + "\n")


def memory(step, state, peak, cuda=None):
    out = {"step": step, "params_bytes": state // 4, "grads_bytes": state // 4, "optimizer_bytes": state // 2,
           "state_bytes": state, "rss_bytes": peak // 2, "peak_rss_bytes": peak}
    if cuda is not None:
        out["cuda_peak_bytes"] = cuda
    return out


@pytest.fixture
def run(tmp_path):
    """Two ranks, one GPU each (rank 1's GPU is shared with rank 2, which has no memory records)."""
    write_run(tmp_path, [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1;2")], duration=60)
    write_metrics(tmp_path, ranks=3, steps=20)
    add_memory(tmp_path, 0, [memory(1, 8 * MIB, 500 * MIB, 30 * MIB), memory(11, 8 * MIB, 600 * MIB, 40 * MIB),
                             memory(20, 8 * MIB, 550 * MIB, 35 * MIB)])
    add_memory(tmp_path, 1, [memory(1, 2 * MIB, 400 * MIB)])
    return tmp_path


@pytest.mark.parametrize("engine", ["pyarrow", "csv"])
def test_both_readers_mark_memory_records(run, engine):
    if engine == "pyarrow" and not readers.have_pyarrow():
        pytest.skip("pyarrow not installed")
    arrays, _ = metrics_log.read_metrics_arrays(os.path.join(run, "metrics", "rank0.jsonl"), engine=engine)
    assert int(arrays["is_memory"].sum()) == 3 and int(arrays["is_step"].sum()) == 20
    assert arrays["state_bytes"][arrays["is_memory"]].tolist() == [8 * MIB] * 3


def test_each_rank_shows_what_it_holds_and_its_peaks(run):
    d = json.loads(hl("report", str(run), "--format", "json").stdout)
    ranks = {r["rank"]: r["memory"] for r in d["ranks"]}
    assert ranks[0] == {"state_mib": 8.0, "params_mib": 2.0, "grads_mib": 2.0, "optimizer_mib": 4.0,
                        "peak_rss_mib": 600.0, "cuda_peak_mib": 40.0, "gpu_mem_used_mib": 40000.0}
    assert ranks[1]["state_mib"] == 2.0 and ranks[1]["cuda_peak_mib"] is None
    assert ranks[1]["gpu_mem_used_mib"] is None          # its GPU is shared with rank 2: not its own use
    assert ranks[2] is None                               # no records, a shared GPU: nothing to show
    text = hl("report", str(run), env={**os.environ, "COLUMNS": "120"}).stdout
    view = text.split("Memory per rank")[1]
    assert "8.00" in view and "600.00" in view and "40,000.00" in view and "40,001" not in view
    html = hl("report", str(run), "--format", "html", "-o", str(run / "r.html")).stdout
    page = open(run / "r.html").read() if os.path.exists(run / "r.html") else html
    assert "Memory per rank" in page and "600.00" in page
