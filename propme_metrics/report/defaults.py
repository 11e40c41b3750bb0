"""The report's defaults that more than one module reads: `build_report`, report.html and `propme report`."""
from __future__ import annotations

#: documents of a final span shown in report.html's panel (the best matches)
HTML_DOCS_PER_SPAN = 3
#: characters of document context shown on each side of a span in report.html
HTML_SNIPPET_CHARS = 200
