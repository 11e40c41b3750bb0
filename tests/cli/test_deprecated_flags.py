"""Renamed flags keep working for a release: the old spelling sets the new option, is hidden from
--help and says which flag to use."""
from __future__ import annotations

from propme.cli.app import build_parser


def test_retraced_other_settings_is_a_hidden_alias_of_retraced_other_trace_options(capsys):
    parser = build_parser()
    base = ["report", "run", "--out", "r"]
    assert build_parser().parse_args(base).retraced_other_trace_options is False
    capsys.readouterr()
    assert parser.parse_args([*base, "--retraced-other-trace-options"]).retraced_other_trace_options is True
    assert "deprecated" not in capsys.readouterr().err
    assert parser.parse_args([*base, "--retraced-other-settings"]).retraced_other_trace_options is True
    assert "--retraced-other-settings is deprecated, use --retraced-other-trace-options" in capsys.readouterr().err
    report = next(a for a in parser._actions if a.choices and "report" in a.choices).choices["report"]
    shown = report.format_help()
    assert "--retraced-other-trace-options" in shown and "--retraced-other-settings" not in shown
