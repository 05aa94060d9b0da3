"""docs/benchmarks.md is assembled from the benches' sections (bench/assemble.py), never typed."""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _assemble():
    spec = importlib.util.spec_from_file_location("assemble", os.path.join(ROOT, "bench", "assemble.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_md_is_what_the_sections_assemble_to():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "assemble.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_section_in_order_own_over_earlier(tmp_path, monkeypatch):
    a = _assemble()
    (tmp_path / "earlier").mkdir()
    for name, text in [("report", "## R new"), ("zeta", "## Z"), ("startup", "## S"), ("earlier/report", "## R old"),
                       ("earlier/submit", "## Sub old"), ("gpu-h100", "## G")]:
        (tmp_path / f"{name}.md").write_text(text + "\n")
    (tmp_path / "startup.json").write_text("{}")  # benchlib's context beside a section: not a section
    monkeypatch.setattr(a, "SECTIONS", str(tmp_path))
    page = a.page()
    heads = [line for line in page.splitlines() if line.startswith("## ")]
    assert heads == ["## S", "## Sub old", "## G", "## R new", "## Z"]
    assert page.startswith("# Benchmarks\n")


def test_check_fails_on_a_hand_edit(tmp_path, monkeypatch):
    a = _assemble()
    target = tmp_path / "benchmarks.md"
    target.write_text(a.page() + "a figure typed by hand\n")
    monkeypatch.setattr(a, "TARGET", str(target))
    monkeypatch.setattr(sys, "argv", ["assemble.py", "--check"])
    assert a.main() == 1
    monkeypatch.setattr(sys, "argv", ["assemble.py"])
    assert a.main() == 0 and target.read_text() == a.page()
