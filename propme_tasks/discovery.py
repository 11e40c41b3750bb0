"""Makes the stock `lm_eval` command find PropMe's tasks without `--include_path`.

lm-eval 0.4.x has no discovery hook for task folders, so the installed `propme_lmeval.pth`
calls `install()` at interpreter start. That only registers an import watcher (stdlib only, no
lm-eval import): when the module defining `TaskManager` is imported (`lm_eval.tasks.manager` from
0.4.12 on, `lm_eval.tasks` before), `TaskManager.__init__` is wrapped to put PropMe's task folder
before any user `--include_path`. Set PROPME_LMEVAL_DISCOVERY=0 to
switch it off; once lm-eval reads the `lm_eval.tasks` entry point (declared in setup.cfg), the
watcher steps aside.

The same watcher wraps more of lm-eval's functions when they are imported, whether discovery is on
or off (they act on PropMe's tasks only): a stderr for PropMe's metrics, PM in each corpus group's
row, and the figures lm-eval's results have no field for written beside them
(`propme_tasks.lmeval_results`); PropMe's tasks built before the model loads, and by `lm_eval
validate` (`propme_tasks.preflight`).

When the program is the `lm_eval` command itself (and only then), `install()` also sets an
exception hook that prints an uncaught PropMe error (such as a task configuration refused before
any generation) as one paragraph without a traceback; the exit status stays non-zero (1). Library
code only raises ordinary exceptions; other programs keep Python's own hook.
"""
import os
import sys

ENV_SWITCH = "PROPME_LMEVAL_DISCOVERY"
#: the modules that define `TaskManager` (0.4.12+, and the releases before)
_DISCOVERY_TARGETS = ("lm_eval.tasks.manager", "lm_eval.tasks")
#: lm-eval's modules PropMe wraps -> the wrapper (`<module of propme_tasks>.<function>`)
_RESULTS_TARGETS = {"lm_eval.evaluator_utils": "lmeval_results.patch_evaluator_utils",
                    "lm_eval.api.group": "lmeval_results.patch_group",
                    "lm_eval.loggers.evaluation_tracker": "lmeval_results.patch_tracker",
                    "lm_eval.config.evaluate_config": "preflight.patch_evaluate_config",
                    "lm_eval._cli.validate": "preflight.patch_validate"}


def tasks_path() -> str:
    """Folder holding PropMe's task YAML (also for `lm_eval --include_path`)."""
    import importlib.util

    spec = importlib.util.find_spec("propme_tasks.task_configs")
    if spec is not None and spec.submodule_search_locations:
        return str(list(spec.submodule_search_locations)[0])
    # a source checkout imported from its root: the YAML lies beside the package
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "task_configs")


def patch_task_manager(manager_module) -> None:
    """Wrap TaskManager.__init__ so PropMe's task folder is always indexed first."""
    if hasattr(manager_module, "discover_plugin_task_paths"):
        return  # lm-eval discovers entry-point task folders itself
    cls = getattr(manager_module, "TaskManager", None)
    if cls is None or getattr(cls, "_propme_patched", False):
        return
    original = cls.__init__

    def __init__(self, verbosity=None, include_path=None, *args, **kwargs):
        if include_path is None:
            paths = []
        elif isinstance(include_path, (list, tuple)):
            paths = list(include_path)
        else:
            paths = [include_path]
        ours = tasks_path()
        if ours not in [os.fspath(p) for p in paths]:
            paths.insert(0, ours)
        original(self, verbosity, paths, *args, **kwargs)

    cls.__init__ = __init__
    cls._propme_patched = True


def patch_results(module) -> None:
    """Wrap the code of an lm-eval module named in `_RESULTS_TARGETS` (`<PropMe module>.<wrapper>`)."""
    import importlib

    where, name = _RESULTS_TARGETS[module.__name__].split(".")
    getattr(importlib.import_module(f"propme_tasks.{where}"), name)(module)


def _patch(module) -> None:
    if module.__name__ in _RESULTS_TARGETS:
        patch_results(module)
    else:
        patch_task_manager(module)


class _Watcher:
    """A meta-path finder that only acts on its target modules, once each."""

    def __init__(self, targets):
        self.pending = set(targets)

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        self.pending.discard(name)
        if not self.pending:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)  # asks this finder again: `name` is no longer pending
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


#: names of the lm-eval command (its console scripts, and `python -m lm_eval`)
_LM_EVAL_COMMANDS = ("lm_eval", "lm-eval")


def running_lm_eval() -> bool:
    """Whether this interpreter runs the `lm_eval` command: its console script (`lm_eval`, `lm-eval`)
    or `python -m lm_eval`. Read from the command line, so it holds from start-up on."""
    argv = getattr(sys, "argv", None) or [""]
    if argv[0] == "-m":  # `python ... -m MODULE ARGS`: MODULE stands just before ARGS
        orig = getattr(sys, "orig_argv", [])
        module = orig[-len(argv)] if len(orig) >= len(argv) else ""
        return module in ("lm_eval", "lm_eval.__main__")
    name = os.path.basename(argv[0].replace("\\", "/"))
    for suffix in (".exe", "-script.py"):  # Windows launchers
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return name in _LM_EVAL_COMMANDS


def _print_propme_errors(kind, exc, tb) -> None:
    """sys.excepthook of the `lm_eval` command: a PropMe error as one paragraph, anything else as usual."""
    from propme_metrics.core.errors import PropMeError

    if isinstance(exc, PropMeError):
        print(f"PropMe: {exc}", file=sys.stderr)
        return
    sys.__excepthook__(kind, exc, tb)


def install() -> None:
    """Called from propme_lmeval.pth at start-up; cheap. Discovery is a no-op when switched off; the
    error hook of the `lm_eval` command is set either way (tasks given by --include_path need it too)."""
    if running_lm_eval() and sys.excepthook is sys.__excepthook__:
        sys.excepthook = _print_propme_errors
    targets = list(_RESULTS_TARGETS)
    if os.environ.get(ENV_SWITCH, "").strip():  # read only when set: start-up stays stdlib-only
        from propme_metrics.core.switches import env_switch

        if env_switch(ENV_SWITCH, default=True):
            targets += _DISCOVERY_TARGETS
    else:
        targets += _DISCOVERY_TARGETS
    if any(isinstance(f, _Watcher) for f in sys.meta_path):
        return
    for name in [t for t in targets if t in sys.modules]:
        _patch(sys.modules[name])
        targets.remove(name)
    if any(t in sys.modules for t in _DISCOVERY_TARGETS):  # one TaskManager module patched: the other is not needed
        targets = [t for t in targets if t not in _DISCOVERY_TARGETS]
    if targets:
        sys.meta_path.insert(0, _Watcher(targets))
