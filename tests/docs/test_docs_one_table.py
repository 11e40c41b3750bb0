"""The docs' tables of tracing options and exit codes are the code's own: the table of tracing
options (`trace/options.py`) in docs/configuration.md and docs/cli.md, the `ExitCode`
enumeration in docs/cli.md."""
from __future__ import annotations

from pathlib import Path

from propme_metrics.core.errors import ExitCode
from propme_metrics.trace.options import TRACE_OPTIONS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table(path: Path, header: str, section: str | None = None) -> list[list[str]]:
    """The rows (cells) of the first table in `path` (after the heading `section`) whose header row is `header`."""
    text = path.read_text(encoding="utf-8")
    if section is not None:
        text = text[text.index(section):]
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _plain(cell: str) -> str:
    return cell.replace("`", "")


def test_configuration_lists_every_tracing_option_as_the_table_defines_it():
    rows = _table(DOCS / "configuration.md", "| key | environment variable | `propme trace` option | default | meaning |")
    assert [r[0] for r in rows] == [f"`{o.key}`" for o in TRACE_OPTIONS]
    for o, (_, env, flag, default, meaning) in zip(TRACE_OPTIONS, rows):
        assert (env, flag) == (f"`PROPME_{o.key.upper()}`", f"`{o.flag}`")
        assert _plain(default) == str(o.default) and _plain(meaning) == o.help, o.name


def test_cli_reference_lists_every_tracing_option_as_the_table_defines_it():
    rows = {r[0]: r[1:] for r in _table(DOCS / "cli.md", "| option | default | meaning |", "## propme trace")}
    for o in TRACE_OPTIONS:
        default, meaning = rows[f"`{o.flag}`"]
        assert _plain(default) == str(o.default) and _plain(meaning) == o.help, o.name


def test_cli_reference_lists_the_exit_codes_of_the_enumeration():
    rows = _table(DOCS / "cli.md", "| status | name | meaning |", "## Exit codes")
    assert [(int(r[0]), r[1]) for r in rows] == [(c.value, f"`{c.name}`") for c in ExitCode]
    for (_, _, meaning), code in zip(rows, ExitCode):
        assert meaning.startswith(code.meaning), code
    assert "| status |" not in (DOCS / "configuration.md").read_text(encoding="utf-8"), "one table, in docs/cli.md"
