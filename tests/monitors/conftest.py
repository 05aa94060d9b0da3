import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from monitor_helpers import Events  # noqa: E402


@pytest.fixture
def events():
    return Events()


@pytest.fixture
def fake():
    import fake_nvml
    fake_nvml.configure()
    yield fake_nvml
    fake_nvml.configure()
    fake_nvml._initialised = False
