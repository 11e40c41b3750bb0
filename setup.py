"""Everything is in setup.cfg; this file only adds the start-up hook `propme_lmeval.pth` to the wheel."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_with_pth(build_py):
    """Copy propme_lmeval.pth to the wheel's top level, where site.py executes it at start-up."""

    def run(self):
        super().run()
        self.copy_file("propme_lmeval.pth", os.path.join(self.build_lib, "propme_lmeval.pth"))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "propme_lmeval.pth")]


setup(cmdclass={"build_py": build_py_with_pth})
