"""The stop rule reads a row's answer incrementally (the tokenizer's stream) and decides
exactly as when the whole answer is decoded at every step: the same reason at the same token
and the same cut text, for byte-level BPE, Metaspace (SentencePiece-style) and byte
tokenizers, over random outputs that split characters across tokens."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from checkpoints.sampler import StopRule
from checkpoints.tokenizer import ByteTokenizer, JsonTokenizer

TEXT = ["The special magic number is 4821. Answer: yes, no, maybe.", "日本語のテキストと emoji 🙂 mixed in.",
        "Graph edges: a -> b, b -> c; the answer is [a, c].", "naïve café résumé — «quotes» and\nnewlines\n"] * 20
STOPS = ("\n", "Answer:", "]", "🙂", "é r")


def trained(kind: str) -> JsonTokenizer:
    """A small fast tokenizer trained here, wrapped as lctx reads tokenizer.json files."""
    if kind == "bytelevel":
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = HFTokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        alphabet = [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet,
                                                      special_tokens=["<unk>", "</s>"]))
    wrapped = JsonTokenizer.__new__(JsonTokenizer)
    wrapped._tok, wrapped.eos_ids, wrapped.vocab_size = tok, [tok.token_to_id("</s>")], tok.get_vocab_size()
    return wrapped


def decide(rule: StopRule, tokens: list[int], decode) -> tuple[int, str | None, str | None]:
    out: list[int] = []
    for i, token in enumerate(tokens):
        reason, cut = rule.after(out, token, decode)
        if reason is not None:
            return i, reason, cut
    return len(tokens), None, None


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace", "bytes"])
def test_incremental_stop_checks_decide_as_whole_decodes(kind: str) -> None:
    tok = ByteTokenizer() if kind == "bytes" else trained(kind)
    rng = random.Random(0)
    texts = [tok.encode(t, add_special_tokens=False) for t in TEXT[:4]]
    for trial in range(60):
        if trial % 2:  # random ids: split characters, byte-fallback pieces, special tokens
            tokens = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 80))]
        else:  # real text, cut anywhere
            ids = rng.choice(texts)
            tokens = ids[rng.randrange(len(ids)):]
        stops = tuple(rng.sample(STOPS, rng.randrange(1, 3)))
        whole = StopRule.make(tok.eos_ids, 60, stop=stops)
        streamed = StopRule.make(tok.eos_ids, 60, stop=stops, streams=tok.decode_stream)
        assert decide(streamed, tokens, tok.decode) == decide(whole, tokens, tok.decode), (kind, tokens, stops)


def test_decided_hears_the_same_text_as_a_whole_decode() -> None:
    tok = trained("bytelevel")
    ids = tok.encode(TEXT[0], add_special_tokens=False)
    heard: dict[str, list[str]] = {"whole": [], "streamed": []}
    for name, streams in (("whole", None), ("streamed", tok.decode_stream)):
        rule = StopRule.make(tok.eos_ids, 200, decided=lambda text, n=name: heard[n].append(text) or False,
                             streams=streams)
        decide(rule, ids, tok.decode)
    assert heard["streamed"] == heard["whole"] and heard["whole"][-1] == TEXT[0]
