"""What report.html and leaderboard.html share: the Jinja environment (every printed value escaped
as the report always spelled it) and the package's static CSS and JS, inlined."""
from __future__ import annotations

import html
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup


def _escape(value: Any) -> Any:
    """Jinja's `finalize`: every printed value as `html.escape(quote=True)` writes it ('' for None).

    The same characters as markupsafe's escaping, spelled as the report always spelled them
    (`&quot;`, `&#x27;`), so the page stays byte for byte what it was; values already marked safe
    (macro output, the few `Markup` values of `Page`) pass through.
    """
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates' environment: strict about undefined names, `_escape` on every printed value."""
    return jinja2.Environment(loader=jinja2.PackageLoader("propme_metrics.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              finalize=_escape)


def static(name: str) -> Markup:
    """A file of `static/`, inlined as it is: the package's own CSS or JS, never data."""
    return Markup(resources.files("propme_metrics.report").joinpath("static", name).read_text(encoding="utf-8"))
