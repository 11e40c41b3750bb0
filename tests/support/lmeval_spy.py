"""The stock lm-eval CLI with one spy: every batch of token ids HFLM hands to `generate` is logged.

Usage: python lmeval_spy.py IDS.jsonl <lm_eval arguments>. Each line of IDS.jsonl is the id list
of one prompt as the model receives it (left padding removed by the attention mask), so tests can
check what really reaches the model, e.g. exactly one start token.
"""
from __future__ import annotations

import json
import sys


def main() -> None:
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.models.huggingface import HFLM

    out = open(sys.argv[1], "a", encoding="utf-8")
    original = HFLM._model_generate

    def spy(self, context, max_length, stop, **kwargs):
        mask = kwargs.get("attention_mask")
        for i, row in enumerate(context.tolist()):
            keep = mask[i].tolist() if mask is not None else [1] * len(row)
            out.write(json.dumps([t for t, m in zip(row, keep) if m]) + "\n")
        out.flush()
        return original(self, context, max_length, stop, **kwargs)

    HFLM._model_generate = spy
    sys.argv = ["lm_eval", *sys.argv[2:]]
    cli_evaluate()


if __name__ == "__main__":
    main()
