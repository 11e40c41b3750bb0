"""The settings PropMe runs, defined once: prompted ones first, then the prompt-free ones."""
from __future__ import annotations

PREFIX = "prefix"
#: settings with a prompt set (built against the index or read from a file)
PROMPTED_SETTINGS = ("generic", "specific", PREFIX)
#: settings without a prompt: the model gets only the start token, or a one-word cue
PROMPT_FREE_SETTINGS = ("unconditional", "minimal_cue")
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
#: the key of every logged document (lm-eval samples) that says whether the model got its prompt
#: inside the model's chat template (`lm_eval --apply_chat_template`) or as raw text
CHAT_TEMPLATE_KEY = "chat_template"


def setting_sort_key(setting: str) -> tuple[int, str]:
    """Known settings in SETTINGS order, then any other setting alphabetically."""
    return (SETTINGS.index(setting), "") if setting in SETTINGS else (len(SETTINGS), setting)
