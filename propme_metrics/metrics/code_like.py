"""Code-like generations (the study's report, section 5.3): code, tables and symbol-heavy text,
whose metrics are also shown apart from natural language.

A generation is code-like when at least `CODE_MIN_LINES` of its non-empty lines, and at least
`CODE_MIN_SHARE` of them, look like code (`looks_like_code`: imports, declarations, braces,
semicolons, comments, assignments, markup), or when under `CODE_MAX_LETTERS` of its non-space
characters are letters (number sequences, tables). The `_nl` metrics of the registry count only the
other, natural-language generations.
"""
from __future__ import annotations

import re

from propme_metrics.trace.text_rules import letter_share

#: at least this many code lines ...
CODE_MIN_LINES = 3
#: ... making up at least this share of the non-empty lines
CODE_MIN_SHARE = 0.3
#: or fewer letters than this share of the non-space characters
CODE_MAX_LETTERS = 0.5

#: what a line of code looks like, one pattern per kind (searched anywhere in the line)
CODE_LINE_PATTERNS: dict[str, str] = {
    "import": r"^\s*(import\s+[\w.]|from\s+[\w.]+\s+import\s|#include\b|using\s+[\w.]+\s*;|require\s*\(|package\s+[\w.]+)",
    "declaration": r"^\s*(def|class|function|func|fn|public|private|protected|static|void|var|let|const|struct|"
                   r"enum|interface|template|typedef)\s+[\w<(]",
    "control": r"^\s*(if|elif|else|for|while|try|except|finally|with)\b[^.!?]*:\s*$",
    "brace": r"^\s*[{}\[\]()]+[;,]?\s*$|[{;]\s*$",
    "comment": r"^\s*(//|/\*|\*/|<!--|#!|#(define|ifn?def|endif|pragma)\b)",
    "assignment": r"^\s*[A-Za-z_$][\w.$\[\]'\"]*\s*([-+*/%|&]|\*\*)?=(?!=)\s*\S",
    "call": r"^\s*[A-Za-z_$][\w.$]*\([^()]*\)\s*;?\s*$",
    "markup": r"^\s*</?[A-Za-z][\w:-]*(\s[^<>]*)?/?>|<\?php|^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP)\s",
    "latex": r"\\(begin|end|frac|sum|int|mathbf|mathrm|text|left|right|label|section)\b",
}
_CODE_LINE = re.compile("|".join(f"(?:{p})" for p in CODE_LINE_PATTERNS.values()))


def looks_like_code(line: str) -> bool:
    """Whether one line looks like code (any of CODE_LINE_PATTERNS)."""
    return _CODE_LINE.search(line) is not None


def is_code_like(text: str) -> bool:
    """Code or symbol-heavy text: enough code lines (CODE_MIN_LINES and CODE_MIN_SHARE of the
    non-empty lines), or under CODE_MAX_LETTERS letters among the non-space characters."""
    lines = [x for x in text.splitlines() if x.strip()]
    code = sum(looks_like_code(x) for x in lines)
    if code >= CODE_MIN_LINES and code >= CODE_MIN_SHARE * len(lines):
        return True
    share = letter_share(text)
    return share is not None and share < CODE_MAX_LETTERS
