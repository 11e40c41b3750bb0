"""Everything is in setup.cfg; this file adds the start-up hook `propme_lmeval.pth` to the wheel and
to the editable install (`pip install -e .`), so stock `lm_eval` finds PropMe's tasks, and compiles
the native suffix-array search (`propme_metrics/index/native_ext.c`). That extension is optional: where
it cannot be compiled (no C compiler, no pthreads), the install goes on and the search runs in numpy
(`propme_metrics/index/native_search.py` says which one a process uses)."""
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HOOK = "propme_lmeval.pth"


class build_py_with_pth(build_py):
    """Copy the hook to the wheel's top level, where site.py executes it at start-up."""

    def run(self):
        super().run()
        self.copy_file(HOOK, os.path.join(self.build_lib, HOOK))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, HOOK)]


class editable_wheel_with_pth(editable_wheel):
    """The editable wheel gets the hook beside setuptools' own `__editable__` .pth file.

    setuptools writes that wheel's top level in `_install_namespaces` (setuptools >= 64); the hook
    is added there, as the regular wheel has it.
    """

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copy(HOOK, os.path.join(installation_dir, HOOK))


NATIVE_SEARCH = Extension("propme_metrics.index.native_ext", ["propme_metrics/index/native_ext.c"],
                          extra_compile_args=["-O2", "-pthread"], extra_link_args=["-pthread"], optional=True)

setup(cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth},
      ext_modules=[NATIVE_SEARCH])
