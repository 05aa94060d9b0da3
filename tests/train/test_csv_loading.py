"""load_csv: numpy's fast parser and the csv-module path give the same data, bit for bit."""
import numpy as np
import pytest

from hpclaunch.train_entry import data as D


def _both(path, label="label", monkeypatch=None):
    fast = D.load_csv(str(path), label)
    monkeypatch.setattr(D, "_load_numeric", lambda *a: None)
    slow = D.load_csv(str(path), label)
    monkeypatch.undo()
    return fast, slow


@pytest.mark.parametrize("text,label", [
    ("a,label,b\n0.1,3,2.5\n1e-3,7,-4\n\n0.30000001,3,8\n", "label"),       # label in the middle, a blank line
    ("x,y\n1.5,2.0\n2.25,-1\n3,2\n", "y"),                                   # whole-number float labels
    ("f0,f1,label\n" + "\n".join(f"{i / 7:.9f},{i * 1.1:.5f},{i % 4}" for i in range(500)) + "\n", "label"),
])
def test_fast_and_csv_paths_agree(tmp_path, monkeypatch, text, label):
    p = tmp_path / "d.csv"
    p.write_text(text)
    assert D._load_numeric(str(p), len(text.split("\n")[0].split(","))) is not None  # the fast path ran
    fast, slow = _both(p, label, monkeypatch)
    assert fast.features.dtype == slow.features.dtype == np.float32
    assert fast.features.tobytes() == slow.features.tobytes()
    assert fast.labels.dtype == slow.labels.dtype and (fast.labels == slow.labels).all()
    assert fast.classes == slow.classes and fast.feature_names == slow.feature_names
    assert [type(c) for c in fast.classes] == [type(c) for c in slow.classes]


def test_string_labels_and_bad_cells_take_the_csv_path(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("a,label\n1,cat\n2,dog\n3,cat\n")
    assert D._load_numeric(str(p), 2) is None
    d = D.load_csv(str(p))
    assert d.classes == ["cat", "dog"] and d.labels.tolist() == [0, 1, 0]
    p.write_text("a,label\n1,0\nx,1\n")
    with pytest.raises(D.DataError, match="non-numeric feature value"):
        D.load_csv(str(p))
    p.write_text("a,label\n")
    with pytest.raises(D.DataError, match="no data rows"):
        D.load_csv(str(p))


def test_digits_csv_agrees(tmp_path, monkeypatch, digits_csv):
    fast, slow = _both(digits_csv, "label", monkeypatch)
    assert fast.features.tobytes() == slow.features.tobytes() and (fast.labels == slow.labels).all()
    assert fast.classes == slow.classes == list(range(10))
