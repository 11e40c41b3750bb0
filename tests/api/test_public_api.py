"""The supported Python API: every name of `propme_metrics.__all__` resolves to its defining module's object,
and importing the package alone stays cheap (no torch, transformers or lm-eval)."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import propme_metrics


@pytest.mark.parametrize("name", sorted(set(propme_metrics.__all__) - {"__version__"}))
def test_public_name_is_the_defining_modules_object(name):
    module = importlib.import_module(propme_metrics._API[name])
    assert getattr(propme_metrics, name) is getattr(module, name)
    assert name in dir(propme_metrics)


def test_all_lists_exactly_the_lazy_names():
    assert set(propme_metrics.__all__) == set(propme_metrics._API) | {"__version__"}


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'open_indx'"):
        propme_metrics.open_indx  # noqa: B018


def test_documented_import_line_works():
    from propme_metrics import TraceConfig, Tracer, open_index, summarize

    assert callable(open_index) and callable(summarize)
    assert TraceConfig().mode and Tracer.__name__ == "Tracer"


def test_package_import_loads_no_heavy_dependency():
    code = ("import sys, propme_metrics; "
            "print(sorted(m for m in ('torch', 'transformers', 'lm_eval', 'matplotlib', 'wordfreq') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
