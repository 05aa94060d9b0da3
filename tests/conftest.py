import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def run_cli(capsys):
    """Run `hpclaunch ARGS` in-process: (exit code, stdout, stderr)."""
    from hpclaunch.cli import main

    def run(*args):
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def write(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)

    return write
