"""Which NVML binding the daemon samples through: ``pynvml`` (from nvidia-ml-py), imported only
when a node is to be sampled, or the module the tests' hook names instead."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

FAKE_ENV = "HPCLAUNCH_MONITOR_FAKE_NVML"  # test hook: module name or .py path replacing pynvml


def load_pynvml():
    """The NVML binding: ``pynvml`` from nvidia-ml-py, or the test hook's module."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        if fake.endswith(".py"):
            spec = importlib.util.spec_from_file_location("hpclaunch_fake_nvml", fake)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
            return mod
        return importlib.import_module(fake)
    import pynvml  # noqa: WPS433 (lazy on purpose)
    return pynvml
