"""Each option and status is described once and read everywhere: the tracing options (one per
TraceConfig field) by `propme trace` and the lm-eval tasks' metadata schema alike, the exit codes
by the error classes and `propme --help`, the contamination rule by `propme contamination` and
`propme report` alike."""
from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from propme.cli.app import build_parser
from propme_metrics.core.errors import (
    BuildError,
    ConfigError,
    ExitCode,
    IndexFormatError,
    OutOfMemoryError,
    PropMeError,
    TraceWorkerError,
)
from propme_metrics.trace.options import TRACE_OPTIONS
from propme_metrics.trace.result import TraceConfig
from propme_tasks.schema import KEYS, TaskConfigError, parse_value, read_options

TRACE_REQUIRED = ["trace", "--index", "i", "--input", "g.jsonl", "--out", "r.jsonl", "--summary", "s.json"]


def _subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def _cli_accepts(flag: str, value) -> bool:
    try:
        build_parser().parse_args([*TRACE_REQUIRED, flag, str(value)])
        return True
    except SystemExit as exc:
        assert exc.code == ExitCode.BAD_INPUT
        return False


def _schema_accepts(key: str, value) -> bool:
    try:
        parse_value(KEYS[key], value, key)
        return True
    except TaskConfigError:
        return False


def _config_accepts(name: str, value) -> bool:
    try:
        TraceConfig(**{name: value})
        return True
    except ValueError:
        return False


@pytest.fixture
def no_trace_env(monkeypatch):
    for o in TRACE_OPTIONS:
        monkeypatch.delenv(f"PROPME_{o.key.upper()}", raising=False)


def test_every_tracing_field_is_one_option():
    assert [o.name for o in TRACE_OPTIONS] == [f.name for f in fields(TraceConfig)]
    parser = _subparser("trace")
    assert {o.key for o in TRACE_OPTIONS} == {k for k in KEYS if k.startswith("trace_")} - {
        "trace_backend", "trace_ray_address", "trace_ray_actors", "trace_workers"}  # how to trace, not what
    for o in TRACE_OPTIONS:
        assert _action(parser, o.flag).dest == o.name and _action(parser, o.flag).help == o.help


def test_cli_and_schema_have_the_same_defaults(no_trace_env):
    args = build_parser().parse_args(TRACE_REQUIRED)
    from_metadata = read_options({}).trace
    for o in TRACE_OPTIONS:
        assert getattr(args, o.name) == getattr(from_metadata, o.name) == getattr(TraceConfig(), o.name)


def test_cli_and_schema_have_the_same_integer_ranges():
    for o in TRACE_OPTIONS:
        if o.kind is not int:
            continue
        # the lower bound is TraceConfig's own, the upper one the table's: both ends in, one past each out
        assert _config_accepts(o.name, o.minimum) and not _config_accepts(o.name, o.minimum - 1)
        for value, inside in ((o.minimum - 1, False), (o.minimum, True), (o.maximum, True), (o.maximum + 1, False)):
            assert _cli_accepts(o.flag, value) is inside, (o.flag, value)
            assert _schema_accepts(o.key, value) is inside, (o.key, value)


def test_cli_and_schema_take_the_same_choices(no_trace_env):
    for o in TRACE_OPTIONS:
        if o.kind is not str:
            continue
        assert tuple(_action(_subparser("trace"), o.flag).choices) == o.choices
        for choice in o.choices:
            assert _config_accepts(o.name, choice)
            assert getattr(build_parser().parse_args([*TRACE_REQUIRED, o.flag, choice]), o.name) == choice
            assert getattr(read_options({o.key: choice}).trace, o.name) == choice
        assert not _cli_accepts(o.flag, "nonsense")
        with pytest.raises(TaskConfigError, match="bad tracing parameters"):
            read_options({o.key: "nonsense"})


def test_error_classes_and_help_read_the_exit_codes():
    expected = {PropMeError: 2, ConfigError: 2, IndexFormatError: 3, BuildError: 4, OutOfMemoryError: 4,
                TraceWorkerError: 4}
    assert {cls: int(cls.exit_code) for cls in expected} == expected
    assert all(isinstance(cls.exit_code, ExitCode) for cls in expected)
    epilog = build_parser().epilog
    for code in ExitCode:
        assert f"{code.value} {code.meaning}" in epilog


def test_unexpected_errors_map_to_the_enumeration(cli_run, monkeypatch, tmp_path):
    import propme_metrics.index.reader as reader

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(reader, "index_info", interrupted)
    code, _, err = cli_run("index", "info", tmp_path)
    assert code is ExitCode.INTERRUPTED and code == 130 and "resume" in err

    def unreadable(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reader, "index_info", unreadable)
    code, _, err = cli_run("index", "info", tmp_path)
    assert code is ExitCode.BAD_INPUT and "Permission denied" in err


RULE_OPTIONS = ("--k", "--min-coverage", "--field", "--boilerplate-share", "--boilerplate-count")


def test_report_takes_the_contamination_rule_options_of_propme_contamination():
    report, contamination = _subparser("report"), _subparser("contamination")
    for flag in RULE_OPTIONS:
        a, b = _action(report, flag), _action(contamination, flag)
        assert (a.dest, a.default, a.type, a.choices, a.help) == (b.dest, b.default, b.type, b.choices, b.help)


def test_the_rule_options_are_the_fields_of_the_rule():
    from propme_metrics.contamination.rule import ContaminationRule
    from propme_metrics.core.requests import option_spec

    parser, rule = _subparser("contamination"), ContaminationRule()
    for flag, f in zip(RULE_OPTIONS, fields(ContaminationRule), strict=True):
        action = _action(parser, flag)
        assert (action.dest, action.default, action.help) == (f.name, getattr(rule, f.name),
                                                              option_spec(ContaminationRule, f.name).help)
    args = parser.parse_args(["--index", "i", "--out", "o", "--k", "4", "--boilerplate-count", "3", "--field", "answer"])
    assert ContaminationRule.from_cli(args) == ContaminationRule(k=4, boilerplate_min_count=3, field="answer")
    for bad, flag in (({"k": 0}, "--k"), ({"min_coverage": 0}, "--min-coverage"), ({"field": "title"}, "--field"),
                      ({"boilerplate_min_count": 0}, "--boilerplate-count")):
        with pytest.raises(ConfigError, match=flag):   # the same bounds in Python, named by the flag
            ContaminationRule(**bad)


def test_report_refuses_a_bad_rule_before_any_work(cli_run, tmp_path):
    for bad in (("--min-coverage", "0"), ("--boilerplate-share", "1.5"), ("--k", "0"), ("--field", "title")):
        code, _, err = cli_run("report", tmp_path / "runs", "--out", tmp_path / "r", *bad)
        assert code == ExitCode.BAD_INPUT and bad[0] in err
    assert not (tmp_path / "r").exists()
