"""The prompt-free settings: `unconditional` and `minimal_cue` (propensity, resampled by generation).

* `unconditional`: the model is given only the document-start token (see `start.py`).
* `minimal_cue`: the start token and one word, drawn per generation from the 100 most frequent
  alphabetic words of the corpus language in the `wordfreq` package's list, weighted by their
  frequency (`numpy.random.default_rng(seed)`), first letter capitalized.

Each generation is its own record (`<setting>-<k>`), so a report that resamples records resamples
generations. The lists ship inside `wordfreq`: no network is needed.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from propme_metrics.core.errors import ConfigError
from propme_metrics.core.memory import available_memory
from propme_metrics.prompts.prompt_set import PromptRecord
from propme_metrics.prompts.settings import DEFAULT_PROMPT_SEED, PROMPT_FREE_SETTINGS, Setting

CUE_WORDS = 100
#: memory one generation of a prompt-free setting takes on its way to lm-eval (its record, the
#: dataset row with the tracing parameters, the logged sample and its trace), generously
BYTES_PER_GENERATION = 64 * 1024


@lru_cache(maxsize=8)
def cue_words(language: str, k: int = CUE_WORDS) -> tuple[tuple[str, float], ...]:
    """The `k` most frequent alphabetic words of `language` with their wordfreq frequencies."""
    import wordfreq

    if language not in wordfreq.available_languages():
        raise ConfigError(f"wordfreq has no word list for language {language!r}",
                          "set the task's language to one wordfreq knows (e.g. da, en)")
    words: list[tuple[str, float]] = []
    for word in wordfreq.iter_wordlist(language):
        if word.isalpha():
            words.append((word, wordfreq.word_frequency(word, language)))
            if len(words) == k:
                break
    if len(words) < k:
        raise ConfigError(f"wordfreq's list for {language!r} has only {len(words)} alphabetic words, not {k}")
    return tuple(words)


def check_generations_fit(n: int, what: str) -> None:
    """Refuse, before anything is built, more generations than this machine's free memory can hold."""
    free = available_memory()
    if n * BYTES_PER_GENERATION > free:
        raise ConfigError(f"{what} asks for {n:,} generations: about {n * BYTES_PER_GENERATION / 2**30:,.1f} GiB "
                          f"at {BYTES_PER_GENERATION // 1024} KiB each, more than the {free / 2**30:,.1f} GiB of "
                          "memory free", f"ask for at most {free // BYTES_PER_GENERATION:,}")


def prompt_free_records(setting: str, n: int, seed: int = DEFAULT_PROMPT_SEED, language: str | None = None) -> list[PromptRecord]:
    """`n` generation records of a prompt-free setting (prompt text without the start token)."""
    if setting not in PROMPT_FREE_SETTINGS:
        raise ConfigError(f"{setting!r} is not a prompt-free setting ({', '.join(PROMPT_FREE_SETTINGS)})")
    if n < 1:
        raise ConfigError(f"a prompt-free setting needs at least one generation, not {n}")
    check_generations_fit(n, "prompt_free_generations")
    width = len(str(n - 1))
    if setting == Setting.UNCONDITIONAL:
        return [PromptRecord(id=f"{Setting.UNCONDITIONAL}-{k:0{width}d}", prompt="", setting=setting, language=language)
                for k in range(n)]
    if not language:
        raise ConfigError("minimal_cue needs the corpus language (task metadata 'language') for its word list")
    words = cue_words(language)
    freq = np.array([f for _, f in words], dtype=float)
    drawn = np.random.default_rng(seed).choice(len(words), size=n, p=freq / freq.sum())
    return [PromptRecord(id=f"{Setting.MINIMAL_CUE}-{k:0{width}d}", prompt=words[i][0][:1].upper() + words[i][0][1:],
                         setting=setting, language=language) for k, i in enumerate(drawn)]
