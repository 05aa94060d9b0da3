"""choice.py finds backends by name and imports only the one asked for."""
from __future__ import annotations

import pytest

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import choice
from hpclaunch.launchers.backends.base import Backend
from hlcli import modules_loaded


@pytest.mark.parametrize("name", choice.NAMES)
def test_each_name_is_a_backend_of_that_name(name):
    cls = choice.backend_class(name)
    assert issubclass(cls, Backend) and cls.name == name


def test_an_unknown_name_is_one_line_naming_the_choices():
    with pytest.raises(HpclaunchError) as e:
        choice.get_backend("pbs")
    assert str(e.value) == "--backend pbs: unknown backend \u2014 use slurm or local"


def test_the_slurm_backend_loads_nothing_of_the_local_one():
    code = "from hpclaunch.launchers.backends import choice; choice.backend_class('slurm')"
    watch = ("hpclaunch.launchers.backends.local", "hpclaunch.launchers.backends.local_gpus", "tempfile")
    assert modules_loaded(code, watch) == []
