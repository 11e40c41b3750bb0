"""The contamination rule: when an item counts as contaminated (docs/method.md, Contamination).

Default: PaLM's 8-gram 70% rule, measured per token as Llama 2 does: an item is contaminated when
at least 70% of the tokens of its question and answer, joined as the task joins them, lie inside
spans of at least 8 index tokens that occur in the corpus (any count: ConTAM found that ignoring
rare matches and n above 8 miss contaminated items). k-grams that a large share of the task's items
share are boilerplate when they mark a template (frequent in the corpus, or at a fixed position and
not in it: `coverage`): they neither cover tokens nor count in the share. Shared text the corpus
holds only a few times (a passage several items copy) is contamination like any other.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from propme_metrics.core.requests import Request, option

#: the text of an item the rule reads: the question, the gold answer, or both joined
FIELDS = ("joined", "question", "answer")
DEFAULT_K = 8
DEFAULT_MIN_COVERAGE = 0.7
#: a k-gram found in more than this share of a task's items (and in at least two) is shared: boilerplate
#: when it marks a template
DEFAULT_BOILERPLATE_SHARE = 0.2
#: a shared k-gram found at least this often in the corpus is boilerplate (an instruction or stock phrase)
DEFAULT_BOILERPLATE_MIN_COUNT = 10
#: thresholds of the curve of contaminated share and clean score (every other option at its value)
CURVE_K = (4, 8, 13, 20, 50)
CURVE_COVERAGE = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


@dataclass(frozen=True)
class ContaminationRule(Request):
    """An item is contaminated when `coverage(field) >= min_coverage` with spans of at least `k`
    index tokens, boilerplate k-grams left out. Its fields are the rule's options of `propme
    contamination` and `propme report` (help and bounds here, checked once when the rule is made)."""

    k: int = option(DEFAULT_K, minimum=1, help="minimum tokens of a corpus span that counts")
    min_coverage: float = option(DEFAULT_MIN_COVERAGE, minimum=0, maximum=1, above_minimum=True,
                                 help="an item is contaminated when at least this share of its tokens lie in such "
                                 "spans")
    field: str = option("joined", choices=FIELDS, help="the item text the rule reads")
    boilerplate_share: float = option(DEFAULT_BOILERPLATE_SHARE, minimum=0, maximum=1, above_minimum=True,
                                      help="k-grams found in more than this share of a task's items (and in two or "
                                      "more) are shared; shared k-grams that mark a template are boilerplate: they "
                                      "cover nothing and are left out of the share (1: none)")
    boilerplate_min_count: int = option(DEFAULT_BOILERPLATE_MIN_COUNT, minimum=1, flag="--boilerplate-count",
                                        help="a shared k-gram found at least this often in the corpus is "
                                        "boilerplate; one the corpus lacks is boilerplate at a fixed position in "
                                        "every item; fewer copies count as contamination (a passage several items "
                                        "copy)")

    def boilerplate_items(self, n_items: int) -> int:
        """Items a k-gram must occur in to be shared (boilerplate if it marks a template): more than
        `boilerplate_share` of them, and at least two (a k-gram of one item is that item's own text)."""
        return max(2, int(self.boilerplate_share * n_items) + 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
