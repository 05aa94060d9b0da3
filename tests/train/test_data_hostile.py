"""Hostile training data (issue 15): every CSV the trainer cannot use honestly is refused before
training, in one line naming the file, the line or column and the fix, exit 2, no traceback."""
import ctypes
import os
import subprocess

import pytest

from conftest import PY, rank_env
from hpclaunch.train_entry import data as D

GOOD = "a,b,label\n1,2,0\n2,3,1\n4,5,0\n6,7,1\n"

# name -> (file content, words the one line must hold). Each bad cell is on line 3.
CASES = {
    "nan-feature": ("a,b,label\n1,2,0\nnan,3,1\n4,5,0\n", ["line 3", "'a'", "nan is not finite", "fill"]),
    "inf-feature": ("a,b,label\n1,2,0\n2,-inf,1\n4,5,0\n", ["line 3", "'b'", "-inf is not finite"]),
    "float32-overflow": ("a,b,label\n1,2,0\n1e39,3,1\n4,5,0\n", ["line 3", "'a'", "beyond float32"]),
    "nan-label": ("a,b,label\n1,2,0\n2,3,nan\n4,5,1\n", ["line 3", "'label'", "'nan' is not a class id"]),
    "huge-label": ("a,b,label\n1,2,0\n2,3,1e300\n4,5,1\n", ["line 3", "'1e300' is not a class id", "2**53"]),
    "fractional-label": ("a,b,label\n1,2,0\n2,3,1.5\n4,5,1\n", ["line 3", "'1.5' is not a class id"]),
    "empty-label": ("a,b,label\n1,2,cat\n2,3,\n4,5,dog\n", ["line 3", "label '' is missing"]),
    "nan-among-names": ("a,b,label\n1,2,cat\n2,3,NaN\n4,5,dog\n", ["line 3", "label 'NaN' is missing"]),
    "duplicate-label": ("a,label,label\n1,2,0\n2,3,1\n", ["'label' appears 2 times", "columns 2, 3", "rename"]),
    "label-only": ("label\n0\n1\n0\n", ["only the label column", "no feature columns"]),
    "one-class": ("a,b,label\n1,2,7\n2,3,7\n4,5,7\n", ["same label (7", "at least two classes"]),
    "ragged-row": ("a,b,label\n1,2,0\n2,3\n4,5,1\n", ["line 3 has 2 fields", "header has 3"]),
    "non-numeric": ("a,b,label\n1,2,0\n2,x,1\n4,5,1\n", ["line 3", "'b'", "'x' is not a number"]),
    "not-utf8": (b"a,b,label\n1,2,0\n2,\xff3,1\n", ["not UTF-8", "byte 18 is 0xff", "save the CSV as UTF-8"]),
    "utf8-cut-short": (b"a,b,label\n1,2,0\n2,3,\xe2\x82", ["not UTF-8", "byte 20 is 0xe2"]),
}


def _write(path, content):
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())
    return str(path)


def _train_cmd(data, run_dir):
    return [PY, "-m", "hpclaunch.train_entry", "--data", data, "--run-dir", run_dir, "--epochs", "1",
            "--batch-size", "1", "--no-tensorboard", "--no-mlflow", "--quiet"]  # warnings and errors only


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every case's train_entry run, started together (each pays torch's import once)."""
    tmp = tmp_path_factory.mktemp("bad-data")
    procs = {name: subprocess.Popen(_train_cmd(_write(tmp / f"{name}.csv", content), str(tmp / f"run-{name}")),
                                    env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, (content, _) in CASES.items()}
    return tmp, {name: (p.wait(timeout=120), p.stdout.read()) for name, p in procs.items()}


def one_line_refusal(rc, out, *words):
    assert rc == 2, f"exit {rc}\n{out}"
    assert "Traceback" not in out and "Warning" not in out, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and " ERROR " in lines[0], lines
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_data_is_refused_in_one_line(refusals, name):
    tmp, results = refusals
    rc, out = results[name]
    one_line_refusal(rc, out, f"{name}.csv", *CASES[name][1])
    assert not os.path.exists(tmp / f"run-{name}" / "checkpoints"), "refused after training began"


@pytest.mark.parametrize("name", sorted(n for n, (c, _) in CASES.items() if n not in ("not-utf8", "utf8-cut-short")))
def test_the_fast_and_the_csv_path_refuse_alike(tmp_path, monkeypatch, name):
    """numpy's parser reads most files; the csv path reads the rest: neither lets bad data through."""
    path = _write(tmp_path / "d.csv", CASES[name][0])
    with pytest.raises(D.DataError) as fast:
        D.load_csv(path)
    monkeypatch.setattr(D, "_load_numeric", lambda *a: None)
    with pytest.raises(D.DataError) as slow:
        D.load_csv(path)
    assert str(fast.value) == str(slow.value)


def test_good_data_still_loads(tmp_path):
    d = D.load_csv(_write(tmp_path / "d.csv", GOOD))
    assert d.features.shape == (4, 2) and d.classes == [0, 1] and d.labels.tolist() == [0, 1, 0, 1]
    d = D.load_csv(_write(tmp_path / "n.csv", "a,label\n1,cat\n2,dog\n3,cat\n"))
    assert d.classes == ["cat", "dog"]


def test_the_utf8_offset_is_exact_past_the_first_block(tmp_path):
    blob = b"a,label\n" + b"1,0\n2,1\n" * 200_000 + b"3,\xc3"    # 1.6 MB: the bad byte is in the second block
    path = _write(tmp_path / "long.csv", blob)
    with pytest.raises(D.DataError, match=f"byte {len(blob) - 1} is 0xc3"):
        D.load_csv(path)


def test_a_directory_as_data_says_so(tmp_path):
    (tmp_path / "shards").mkdir()
    p = subprocess.run(_train_cmd(str(tmp_path / "shards"), str(tmp_path / "run")), env=rank_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    one_line_refusal(p.returncode, p.stdout, "shards", "is a directory")
    assert "no such file" not in p.stdout


def _drop_read_override():
    """In the child: root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH obeys file modes."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:   # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_an_unreadable_file_is_one_line(tmp_path):
    path = _write(tmp_path / "secret.csv", GOOD)
    os.chmod(path, 0)
    preexec = _drop_read_override if os.geteuid() == 0 else None
    try:
        p = subprocess.run(_train_cmd(path, str(tmp_path / "run")), env=rank_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60, preexec_fn=preexec)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop the capability that lets root read any file here: {exc}")
    one_line_refusal(p.returncode, p.stdout, "secret.csv", "cannot be read", "Permission denied", "permissions")


def test_an_unreadable_file_in_process(tmp_path, monkeypatch):
    """The same refusal where the test cannot drop root's capabilities: open() itself says no."""
    path = _write(tmp_path / "secret.csv", GOOD)

    def denied(p, *a, **k):
        raise PermissionError(13, "Permission denied", p)

    monkeypatch.setattr(D, "open", denied, raising=False)
    with pytest.raises(D.DataError, match=r"secret.csv: cannot be read \(Permission denied\)"):
        D.load_csv(path)
