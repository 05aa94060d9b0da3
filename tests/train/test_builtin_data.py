"""--data digits: scikit-learn's digits without making a file first (the README's job needs no setup step)."""
import json

from hpclaunch.train_entry import data as D
from conftest import PY, rank_env, run


def test_builtin_digits_is_the_csv_bit_for_bit(digits_csv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no file named "digits" here
    built_in, from_csv = D.load_data("digits"), D.load_data(digits_csv)
    assert built_in.features.dtype == from_csv.features.dtype
    assert built_in.features.tobytes() == from_csv.features.tobytes()
    assert (built_in.labels == from_csv.labels).all() and built_in.classes == from_csv.classes
    assert built_in.feature_names == from_csv.feature_names


def test_a_file_named_digits_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits").write_text("a,label\n1,0\n2,1\n")
    assert D.load_data("digits").features.shape == (2, 1)


def test_train_entry_trains_on_builtin_digits(tmp_path):
    res = run([PY, "-m", "hpclaunch.train_entry", "--data", "digits", "--epochs", "1", "--run-dir", tmp_path / "run",
               "--no-tensorboard", "--no-mlflow"], env=rank_env(), cwd=tmp_path)
    assert res.returncode == 0, res.stdout
    recs = [json.loads(line) for line in open(tmp_path / "run" / "metrics" / "rank0.jsonl")]
    assert [r["epoch"] for r in recs if r.get("kind") == "epoch"] == [0]


def test_an_unknown_data_name_names_the_built_in_ones(tmp_path):
    res = run([PY, "-m", "hpclaunch.train_entry", "--data", "digitz", "--run-dir", tmp_path / "run"], cwd=tmp_path)
    assert res.returncode == 2 and "no such file 'digitz' (built in: digits)" in res.stdout, res.stdout


def test_the_digits_csv_writer_never_writes_through_a_planted_link(tmp_path):
    """`python -m hpclaunch.train_entry.digits /tmp/digits.csv`: the temporary file beside OUT was
    `OUT.tmp.<pid>`, opened with open("w"); another user's link at that name in /tmp (1777) had a
    file of the caller's truncated and overwritten (issue 44's audit of writers into shared folders)."""
    import os

    from hpclaunch.train_entry.digits import write_digits_csv

    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.chmod(victim, 0o600)
    out = shared / "digits.csv"
    os.symlink(victim, f"{out}.tmp.{os.getpid()}")
    assert write_digits_csv(str(out)) == 1797
    assert victim.read_text() == "keep\n" and os.stat(victim).st_mode & 0o777 == 0o600
    assert out.read_text().count("\n") == 1798 and os.stat(out).st_mode & 0o777 == 0o644
