"""The metrics reader counts a record only once its line is complete (newline included)."""
import json

from hpclaunch.train_entry.metrics import MetricsWriter, read_metrics


def _written(tmp_path):
    w = MetricsWriter(str(tmp_path), 0, {"job_name": "m"}, tensorboard=False, mlflow=False)
    w.step(epoch=0, step=10, loss=2.5, samples=640, step_time_s=0.003, grad_norm=1.25, lr=0.002, steps=10)
    w.epoch(epoch=0, step=11, loss=2.0, accuracy=0.5, val_loss=1.75, val_accuracy=0.625)
    w.close()
    with open(w.path, "rb") as f:
        return w.path, f.read()


def test_every_cut_of_the_last_record_drops_it(tmp_path):
    path, data = _written(tmp_path)
    assert data.endswith(b"\n") and [r["kind"] for r in read_metrics(path)] == ["header", "step", "epoch"]
    last = data.rstrip(b"\n").rfind(b"\n") + 1      # where the epoch record starts
    before = read_metrics(path)[:2]
    parsed_cuts = 0
    for end in range(last + 1, len(data)):           # every cut inside the last line, newline not yet written
        with open(path, "wb") as f:
            f.write(data[:end])
        try:
            json.loads(data[last:end])
            parsed_cuts += 1
        except ValueError:
            pass
        assert read_metrics(path) == before, data[last:end]
    assert parsed_cuts == 1   # the record without its newline parses, and is still not counted


def test_a_number_cut_short_is_no_record(tmp_path):
    path, data = _written(tmp_path)
    with open(path, "ab") as f:
        f.write(b"12")    # e.g. 12345\n cut after two digits: valid JSON, and no record
    assert [r["kind"] for r in read_metrics(path)] == ["header", "step", "epoch"]
    with open(path, "ab") as f:
        f.write(b"345\n")  # complete now, but a number is still no record (records are objects)
    assert [r["kind"] for r in read_metrics(path)] == ["header", "step", "epoch"]


def test_the_next_attempt_after_a_cut_record_keeps_its_header(tmp_path):
    path, data = _written(tmp_path)
    with open(path, "wb") as f:
        f.write(data[:-20])   # attempt 0 killed in the middle of its epoch record
    w = MetricsWriter(str(tmp_path), 0, {"attempt": 1}, tensorboard=False, mlflow=False)
    w.step(epoch=0, step=12, loss=1.5, samples=64, step_time_s=0.003, grad_norm=None, lr=0.002)
    w.close()
    recs = read_metrics(path)
    assert [(r["kind"], r.get("attempt"), r.get("step")) for r in recs] == [
        ("header", None, None), ("step", None, 10), ("header", 1, None), ("step", None, 12)]
    with open(path, "rb") as f:
        assert f.read().count(b"\n") == 5   # the cut line was ended, not removed: evidence stays
