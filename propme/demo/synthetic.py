"""Synthetic material for the demo, tests and benchmarks: a generated bilingual corpus, a tokenizer
trained on it and a small model trained to memorize planted documents.

The corpus is produced by a small grammar over word lists written for PropMe (no text is copied
from anywhere), seeded, so the same arguments always give the same documents.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from propme_metrics.core.errors import ConfigError

_LEXICON = {
    "da": {
        "subj": ["kommunen", "ministeren", "borgeren", "udvalget", "forfatteren", "lægen", "skolen", "firmaet",
                 "naboen", "landmanden", "retten", "foreningen", "pigen", "fiskeren", "præsten", "sygeplejersken",
                 "redaktøren", "bageren", "kongen", "ingeniøren"],
        "verb": ["besluttede", "beskrev", "afviste", "undersøgte", "fortalte om", "købte", "solgte", "byggede",
                 "fandt", "mistede", "ændrede", "godkendte", "kritiserede", "malede", "reparerede", "anbefalede"],
        "obj": ["den nye bro", "et gammelt hus", "loven om affald", "sommerens høst", "en rød båd", "budgettet",
                "kirkens tårn", "havnen i Ærøskøbing", "en lang rapport", "skovens træer", "de små øer",
                "togbanen mod nord", "en kop kaffe", "vejrudsigten", "den lokale avis", "et brev fra Ålborg"],
        "adv": ["i går", "om morgenen", "efter mødet", "uden tøven", "med stor glæde", "for anden gang",
                "i al hemmelighed", "sidste forår", "på fredag", "under stormen"],
        "conj": ["og derefter", "men bagefter", "fordi", "mens", "selvom"],
        "sources": ["nyheder", "lovtekster", "bøger", "samtaler", "leksikon"],
    },
    "en": {
        "subj": ["the council", "the minister", "a resident", "the committee", "the author", "the doctor",
                 "the school", "the company", "a neighbour", "the farmer", "the court", "the society",
                 "a girl", "the fisherman", "the engineer", "the nurse", "the editor", "the baker"],
        "verb": ["decided on", "described", "rejected", "examined", "talked about", "bought", "sold", "built",
                 "found", "lost", "changed", "approved", "criticised", "painted", "repaired", "recommended"],
        "obj": ["the new bridge", "an old house", "the waste act", "the summer harvest", "a red boat",
                "the budget", "the church tower", "the northern harbour", "a long report", "the forest",
                "the small islands", "the railway line", "a cup of tea", "the weather forecast", "the local paper"],
        "adv": ["yesterday", "in the morning", "after the meeting", "without hesitation", "with great joy",
                "for the second time", "in secret", "last spring", "on Friday", "during the storm"],
        "conj": ["and then", "but afterwards", "because", "while", "although"],
        "sources": ["news", "law", "books", "forum", "wiki"],
    },
}


def sentence(rng: random.Random, language: str) -> str:
    """One grammatical-looking sentence in Danish ('da') or English ('en')."""
    lex = _LEXICON[language]
    parts = [rng.choice(lex["subj"]), rng.choice(lex["verb"]), rng.choice(lex["obj"]), rng.choice(lex["adv"])]
    if rng.random() < 0.35:
        parts += [rng.choice(lex["conj"]), rng.choice(lex["subj"]), rng.choice(lex["verb"]), rng.choice(lex["obj"])]
    text = " ".join(parts)
    end = rng.choices([".", "!", "?"], weights=[0.85, 0.08, 0.07])[0]
    return text[0].upper() + text[1:] + end


def document_text(rng: random.Random, language: str, n_sentences: int) -> str:
    """A document of sentences, with occasional paragraph breaks."""
    out = []
    for i in range(n_sentences):
        out.append(sentence(rng, language))
        out.append("\n\n" if rng.random() < 0.15 and i + 1 < n_sentences else " ")
    return "".join(out).strip()


def generate_corpus(n_docs: int, seed: int = 0, languages: tuple[str, ...] = ("da", "en"),
                    min_sentences: int = 3, max_sentences: int = 30) -> Iterator[dict[str, str]]:
    """Yield `n_docs` records {id, source, language, text}, deterministically from `seed`."""
    rng = random.Random(seed)
    for i in range(n_docs):
        language = languages[i % len(languages)]
        source = rng.choice(_LEXICON[language]["sources"])
        yield {"id": f"{language}-{i:07d}", "source": f"{language}_{source}", "language": language,
               "text": document_text(rng, language, rng.randint(min_sentences, max_sentences))}


#: a notice copied into many documents, as licences and legal formulas are in real corpora: a leak of it
#: is boilerplate, not memorized unique text (the duplication section of the report tells them apart)
BOILERPLATE = ("Ophavsret og vilkår: Denne tekst må ikke gengives, kopieres eller videresendes uden skriftlig "
               "tilladelse fra udgiveren. Alle rettigheder forbeholdes. Spørgsmål om brug af indholdet rettes "
               "til sekretariatet, som svarer inden for ti hverdage.")


def boilerplate_documents(n: int, seed: int = 0, source: str = "da_notices") -> list[dict]:
    """`n` short Danish documents that each end with BOILERPLATE, and the notice itself as one more
    document (`memorized`: a model trained on the planted documents learns it too)."""
    rng = random.Random(seed)
    records = [{"id": f"notice-{i:04d}", "source": source, "language": "da", "memorized": False,
                "text": sentence(rng, "da") + "\n\n" + BOILERPLATE} for i in range(n)]
    records.append({"id": "notice-template", "source": source, "language": "da", "memorized": True,
                    "text": BOILERPLATE})
    return records


def train_tokenizer(texts: list[str], out_dir: str | Path, vocab_size: int = 1000) -> Path:
    """Train a small byte-level BPE tokenizer (GPT-2 style pieces, 'Ġ' word starts) and save it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=1024)
    out = Path(out_dir)
    fast.save_pretrained(out)
    return out


def train_memorizing_model(texts: list[str], tokenizer_dir: str | Path, out_dir: str | Path, steps: int = 400,
                           n_layer: int = 2, n_embd: int = 96, lr: float = 3e-3, seed: int = 0,
                           target_loss: float = 0.05, n_positions: int = 512,
                           checkpoints: Mapping[int, str | Path] | None = None,
                           progress: Callable[[int, int, float], None] | None = None) -> float:
    """Train a tiny GPT-2 until it has memorized `texts`; return the final loss.

    Like real models, each document starts with the document-start token (`start.start_token_for`:
    the one the tokenizer adds itself, else its BOS, else its EOS) and ends with EOS. Full-batch
    AdamW on CPU; the model ends in eval() mode and is saved with its tokenizer, so
    `lm_eval --model hf --model_args pretrained=<out_dir>` can load it. `checkpoints` (training step
    -> folder) saves the model as it is after that many steps too, the way training runs publish
    intermediate checkpoints; a step the training does not reach (the loss met `target_loss`
    earlier) is saved at the end. `progress(step, steps, loss)` is called every 20 steps and at the end.
    """
    import torch
    import transformers
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    from propme_metrics.prompts.start import start_token_for

    token, added, _ = start_token_for(tok)
    start = [] if added else [tok.convert_tokens_to_ids(token)]
    rows = [start + list(tok(t, add_special_tokens=added is not None)["input_ids"]) + [tok.eos_token_id]
            for t in texts]
    width = max(len(r) for r in rows)
    if width > n_positions:
        raise ConfigError(f"a training text has {width} tokens, more than the model's {n_positions} positions")
    ids = torch.full((len(rows), width), tok.eos_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        labels[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    config = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=4,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.eos_token_id)
    model = GPT2LMHeadModel(config)
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    def save(folder: str | Path) -> None:
        model.eval()
        model.save_pretrained(Path(folder))
        tok.save_pretrained(Path(folder))
        model.train()

    pending = dict(sorted((checkpoints or {}).items()))
    model.train()
    loss_value = float("inf")
    for step in range(1, steps + 1):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
        loss_value = loss.item()
        if step in pending:
            save(pending.pop(step))
        if loss_value < target_loss:
            break
        if progress is not None and step % 20 == 0:
            progress(step, steps, loss_value)
    if progress is not None:
        progress(step, steps, loss_value)
    for folder in pending.values():
        save(folder)
    save(out_dir)
    model.eval()
    return loss_value


def demo_corpus(n_memorized: int = 8, n_background: int = 300, seed: int = 0, n_boilerplate: int = 0) -> list[dict]:
    """A bilingual corpus: long planted documents (to be memorized), short background ones and,
    with `n_boilerplate`, that many short documents ending in the same notice (`boilerplate_documents`).

    Planted documents are the only ones long enough (>= 100 tokens) to be sampled as prefix
    prompts, so a model trained on exactly them shows capability on the prefix setting.
    """
    rng = random.Random(seed)
    records = []
    for i in range(n_memorized):
        language = ("da", "en")[i % 2]
        records.append({"id": f"planted-{i:03d}", "source": f"{language}_planted", "language": language,
                        "memorized": True, "text": document_text(rng, language, rng.randint(8, 10))})
    for i in range(n_background):
        language = ("da", "en")[i % 2]
        records.append({"id": f"background-{i:04d}", "source": f"{language}_background", "language": language,
                        "memorized": False, "text": document_text(rng, language, rng.randint(1, 3))})
    if n_boilerplate:
        records += boilerplate_documents(n_boilerplate, seed=seed + 1)
    rng.shuffle(records)
    return records
