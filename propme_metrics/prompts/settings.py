"""The settings PropMe runs, defined once: prompted ones first, then the prompt-free ones, and the
name of each lm-eval task (`task_name`)."""
from __future__ import annotations

from propme_metrics.core.names import StrEnum


class Setting(StrEnum):
    """A prompt condition; the value is the name in task names, samples, tables and files."""

    GENERIC = "generic"
    SPECIFIC = "specific"
    PREFIX = "prefix"
    UNCONDITIONAL = "unconditional"
    MINIMAL_CUE = "minimal_cue"


PREFIX = Setting.PREFIX
#: settings with a prompt set (built against the index or read from a file)
PROMPTED_SETTINGS = (Setting.GENERIC, Setting.SPECIFIC, PREFIX)
#: settings without a prompt: the model gets only the start token, or a one-word cue
PROMPT_FREE_SETTINGS = (Setting.UNCONDITIONAL, Setting.MINIMAL_CUE)
#: every setting, in the order of tables, columns and task groups; the propensity settings are all but prefix
SETTINGS = (*PROMPTED_SETTINGS, *PROMPT_FREE_SETTINGS)
#: prompts per prompted setting and generations per prompt-free setting, and the seed that draws them
DEFAULT_N_PROMPTS = 100
DEFAULT_PROMPT_SEED = 42
#: prefix prompts: the first PREFIX_TOKENS index tokens of a document of at least PREFIX_MIN_DOC_TOKENS,
#: the next CONTINUATION_TOKENS kept as the true continuation (discoverable extraction)
PREFIX_TOKENS = 50
CONTINUATION_TOKENS = 50
PREFIX_MIN_DOC_TOKENS = 100
#: what every PropMe task name starts with: `propme_<corpus>` (group), `propme_<corpus>_<setting>`
TASK_PREFIX = "propme_"
#: what marks the likelihood subtask in its metadata (`measure: likelihood`), and its name's suffix: the
#: subtask is `propme_<corpus>_likelihood`; before task version 3.0 it was `propme_<corpus>_prefix_likelihood`,
#: a name that begins with the prefix subtask's (an alias for one release: task_configs/README.md), which the
#: readers still take
MEASURE_KEY, LIKELIHOOD = "measure", "likelihood"
SUBTASK_SUFFIX = "likelihood"
OLD_SUBTASK_SUFFIX = "prefix_likelihood"
#: how the report's columns and Every Eval Ever records name the likelihood figures (the prefix documents
#: scored by likelihood), the same under either task name
LIKELIHOOD_SETTING = "prefix_likelihood"


def task_name(corpus: str, setting: str | None = None) -> str:
    """The lm-eval task of a corpus's setting (`propme_dynaword_prefix`), or its group without one;
    `setting` may also be a subtask suffix such as the likelihood subtask's `likelihood`."""
    return f"{TASK_PREFIX}{corpus}" + (f"_{setting}" if setting else "")


def setting_sort_key(setting: str) -> tuple[int, str]:
    """Known settings in SETTINGS order, then any other setting alphabetically."""
    return (SETTINGS.index(setting), "") if setting in SETTINGS else (len(SETTINGS), setting)
