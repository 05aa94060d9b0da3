"""Test modules have unique basenames: tests/ has no __init__.py, so pytest's
default import mode refuses a second module of the same name at collection
(CI stopped on tests/test_launchers.py beside tests/train/test_launchers.py)."""
from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique():
    here = Path(__file__).resolve().parent
    names = Counter(p.name for p in here.rglob("test_*.py")
                    if "__pycache__" not in p.parts)
    assert [n for n, c in names.items() if c > 1] == []
