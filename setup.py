"""The build step setup.cfg cannot say: a wheel carries the job templates compiled by Jinja.

Everything else (metadata, the folder map, package data) is in setup.cfg. After build_py has
copied the package into the build folder, the templates there are compiled to Python modules
beside them (launchers/templating.py: ``hpclaunch/templates/_compiled/``), so an installed
hpclaunch renders from bytecode. An editable install builds nothing: it renders from the sources,
as a checkout does.
"""
import importlib.util
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _templating():
    # By path: importing the checkout's `hpclaunch` here would be importing the thing being built.
    spec = importlib.util.spec_from_file_location("_hpclaunch_templating", os.path.join(HERE, "launchers", "templating.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyCompilingTemplates(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        templating = _templating()
        folder = os.path.join(self.build_lib, "hpclaunch", "templates")
        target = os.path.join(folder, templating.COMPILED)
        shutil.rmtree(target, ignore_errors=True)  # a reused build folder: nothing of an older build stays
        count = templating.compile_into(folder, target)
        self.announce(f"compiled {count} templates into {target}", level=2)


setup(cmdclass={"build_py": BuildPyCompilingTemplates})
