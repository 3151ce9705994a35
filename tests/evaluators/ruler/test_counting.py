"""Building RULER's samples at about one encode per sample (issue #41): the searches decided
on counted units draw exactly the samples of the search that encodes every probe, and of the
code before the change (digests below); units add up exactly on a byte-level BPE; a
tokenizer whose counts do not add up falls back to encoding every probe; the cost stays under
twice an encode of each prompt; the data directory's cache gives the same samples back."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from checkpoints.config import ModelConfig
from checkpoints.tokenizer import JsonTokenizer, load_tokenizer
from evaluators.ruler.cache import CACHE_FOLDER, generate_cached
from evaluators.ruler.counting import EXACT_AFTER, CountingTokenizer, Sizer, TokenCounts, Unreliable
from evaluators.ruler.options import RULER_TASKS
from evaluators.ruler.protocol import TASKS
from evaluators.ruler.synthetic import RulerSample, generate

PARITY_LENGTHS, PARITY_SAMPLES = (2048, 8192), 3
# sha256(json [[input, answer_prefix, outputs, length], ...])[:16] of the first 3 samples that
# evaluators/ruler/synthetic.py drew at commit 7ba8654 (before this change: every probe
# encoded) with SmolLM2's tokenizer on the `ruler_data` fixture, seed 42, no wrapper.
BEFORE = {
    "niah_single_1/2048": "be900c185a23f749", "niah_single_1/8192": "8cda5ed318f7582f",
    "niah_single_2/2048": "2f0a4646b900c17a", "niah_single_2/8192": "2c24a2f728783a5d",
    "niah_single_3/2048": "c9b15025528bb99e", "niah_single_3/8192": "bf2b991e477cc9e0",
    "niah_multikey_1/2048": "0384eaad9e7edcfc", "niah_multikey_1/8192": "184b34edb4431f19",
    "niah_multikey_2/2048": "67dce5510d16b4c9", "niah_multikey_2/8192": "cbf0e4738c634da8",
    "niah_multikey_3/2048": "21a26e1902afc3de", "niah_multikey_3/8192": "a5f816db399c57fd",
    "niah_multivalue/2048": "857d8f194ec10039", "niah_multivalue/8192": "e1e1930f665b555d",
    "niah_multiquery/2048": "8fbfae2fe72232bb", "niah_multiquery/8192": "856bced9f86ed176",
    "vt/2048": "1dae252eda5d631e", "vt/8192": "331d6019e1eb33bf",
    "cwe/2048": "d5005c2a266674a4", "cwe/8192": "6dd20587f83992aa",
    "fwe/2048": "eb9474e751b1a2ab", "fwe/8192": "ca25826a0e8631ed",
    "qa_1/2048": "b36e1219129e70e7", "qa_1/8192": "51c12b1b9814e533",
    "qa_2/2048": "7d36688c65b038bf", "qa_2/8192": "03b2077ef8416907",
}
FALLBACK = "encoding every probe"


@pytest.fixture(scope="module")
def smollm2(real_model: Path) -> JsonTokenizer:
    return load_tokenizer(real_model, None)


def rows(samples: list[RulerSample]) -> list[list]:
    return [[s.input, s.answer_prefix, s.outputs, s.length] for s in samples]


def digest(samples: list[RulerSample]) -> str:
    return hashlib.sha256(json.dumps(rows(samples)).encode()).hexdigest()[:16]


@pytest.mark.parametrize("task", RULER_TASKS)
def test_counted_search_draws_the_samples_of_the_search_that_encodes_every_probe(
        task: str, smollm2, ruler_data: Path, caplog) -> None:
    gen = TASKS[task].spec.tokens_to_generate
    for length in PARITY_LENGTHS:
        with caplog.at_level(logging.WARNING, "lctx.ruler"):
            counted = generate(task, smollm2, length, PARITY_SAMPLES, data_dir=ruler_data)
        exact = generate(task, smollm2, length, PARITY_SAMPLES, data_dir=ruler_data, exact=True)
        assert rows(counted) == rows(exact)  # prompts, answers and token counts, sample by sample
        assert digest(counted) == BEFORE[f"{task}/{length}"]  # and the code before the change
        for s in counted:  # the kept ids are the request's: the prompt as the model receives it
            assert list(s.ids) == smollm2.encode(s.prompt) and s.length == len(s.ids) + gen <= length
    assert FALLBACK not in caplog.text  # SmolLM2's counts add up: no stream was drawn twice


PIECES = ["The", " grass", " is", " green.", "\n", "\n\n", " ", "  ", ".", ",", " 1234567", "VAR", " QXZ",
          " = ", " \n", "\t", "Document 12:\n", "-hippodrome", " Early-ATM", "é", "’s", "'s", " ...", "\u00a0",
          " 3f2a9c1e-77b0-4d1e", "?", " What", "1.", " 2.", "\r\n", " tasty-apple", "-", "a-", "x9-y", " 98-76",
          " 9081726354.", "ö-ä", "--b"]


def test_units_add_up_exactly_on_byte_level_bpe(smollm2) -> None:
    """GPT-2's pre-tokenization never joins across the cuts, so SmolLM2's counts add up on any
    text (what lets the search take far probes on counts with a margin to spare)."""
    rng = random.Random(0)
    counts = TokenCounts(smollm2)
    for _ in range(400):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 60)))
        assert counts.estimate(text) == len(smollm2.encode(text, add_special_tokens=False)), repr(text)


def test_numbers_are_counted_by_their_shape_only_where_every_digit_is_a_token_alone(smollm2, tmp_path: Path) -> None:
    """SmolLM2 has no token joining a digit to anything: a haystack's fresh ten-digit values are
    counted once per shape (no counted unit keeps a digit other than 0) and still add up exactly.
    A vocabulary with a two-digit token counts numbers as they are."""
    rng = random.Random(1)
    text = "\n".join(f"One of the special magic numbers for tasty-apple is: {rng.randint(10**9, 10**10 - 1)}."
                     for _ in range(300))
    assert smollm2.digits_alone()
    counts = TokenCounts(smollm2)
    assert counts.estimate(text) == len(smollm2.encode(text, add_special_tokens=False))
    assert not any(c in "123456789" for unit in counts.units for c in unit) and len(counts.units) < 20
    tok = HFTokenizer(models.WordLevel({"[UNK]": 0, "12": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    joined = JsonTokenizer(tmp_path, None)
    assert not joined.digits_alone() and TokenCounts(joined).fold is None
    counts = TokenCounts(joined)
    assert counts.estimate(text) == len(joined.encode(text, add_special_tokens=False))
    assert any(c in "123456789" for unit in counts.units for c in unit)


def test_estimates_are_taken_as_exact_only_after_whole_texts_matched_their_encodes(word_tokenizer) -> None:
    """A text is turned down on its estimate alone past a quarter of the margin, or past the
    limit itself once EXACT_AFTER whole texts' estimates equalled their encodes; a miss brings
    the slack back, and a miss beyond it makes the counts Unreliable."""
    sizer, limit = Sizer(TokenCounts(word_tokenizer)), 32768
    assert sizer.slack(limit) == Sizer.margin(limit) // 4 == 8
    for _ in range(EXACT_AFTER - 1):
        sizer.compare(100, 100, limit)
    assert sizer.slack(limit) == 8
    sizer.compare(100, 100, limit)
    assert sizer.slack(limit) == 0
    sizer.compare(100, 101, limit)
    assert sizer.slack(limit) == 8
    with pytest.raises(Unreliable):
        sizer.compare(100, 109, limit)


def newline_joining_tokenizer(folder: Path) -> JsonTokenizer:
    """Whitespace-separated words, each one token, and a newline that does not separate them
    (SentencePiece-like): a line cut after its newline counts one token more than in context."""
    tok = HFTokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok.save(str(folder / "tokenizer.json"))
    return JsonTokenizer(folder, ModelConfig(hidden_size=8, num_layers=1, num_heads=1, intermediate_size=8,
                                             vocab_size=1))


@pytest.mark.parametrize("task", ["niah_single_1", "vt"])
def test_counts_that_do_not_add_up_fall_back_to_encoding_every_probe(task: str, tmp_path: Path, caplog) -> None:
    tok = newline_joining_tokenizer(tmp_path)
    with caplog.at_level(logging.WARNING, "lctx.ruler"):
        counted = generate(task, tok, 2000, 3)
    assert FALLBACK in caplog.text
    assert rows(counted) == rows(generate(task, tok, 2000, 3, exact=True))


@pytest.mark.parametrize("task", ["niah_single_1", "niah_multikey_2", "vt", "cwe", "fwe", "niah_single_2", "qa_1"])
def test_building_costs_at_most_two_encodes_of_each_prompt(task: str, smollm2, ruler_data: Path) -> None:
    """Everything the generator encodes (probes, units, retries) against encoding each finished
    prompt once; the request reuses the ids, so this is the whole tokenizer work of a sample."""
    counting = CountingTokenizer(smollm2)
    drawn = generate(task, counting, 8192, 20, data_dir=ruler_data)
    assert counting.chars <= 2 * sum(len(s.prompt) for s in drawn)
    assert counting.calls <= 4 * len(drawn)  # bounded: about one encode and one small batch per sample


def test_a_second_build_reads_the_cache(word_tokenizer, ruler_data: Path, tmp_path: Path) -> None:
    data = shutil.copytree(ruler_data, tmp_path / "data")
    assert generate_cached("niah_single_2", word_tokenizer, 1200, 3, 42, ("", ""), data) and \
        not (data / CACHE_FOLDER).exists()  # no cache folder: nothing written
    (data / CACHE_FOLDER).mkdir(parents=True)
    first = generate_cached("niah_single_2", word_tokenizer, 1200, 3, 42, ("", ""), data)
    files = list((data / CACHE_FOLDER).iterdir())
    assert [f.name.split("-")[:2] for f in files] == [["niah_single_2", "1200"]] and files[0].suffix == ".gz"
    assert not list((data / CACHE_FOLDER).glob(".*"))  # the temporary file was renamed into place

    counting = CountingTokenizer(word_tokenizer)
    again = generate_cached("niah_single_2", counting, 1200, 3, 42, ("", ""), data)
    assert rows(again) == rows(first) == rows(generate("niah_single_2", word_tokenizer, 1200, 3, data_dir=data))
    assert counting.calls == 0 and again[0].ids is None  # read, not drawn: the request encodes the prompt
    assert rows(generate_cached("niah_single_2", counting, 1200, 2, 42, ("", ""), data)) == rows(first[:2])
    assert counting.calls == 0  # fewer samples: the stream's prefix
    # what changes a prompt changes the key: seed, wrapper, the essay's text
    generate_cached("niah_single_2", word_tokenizer, 1200, 3, 7, ("", ""), data)
    generate_cached("niah_single_2", word_tokenizer, 1200, 3, 42, ("[INST] ", " [/INST]"), data)
    essay = data / "PaulGrahamEssays.json"
    essay.write_text(json.dumps({"text": json.loads(essay.read_text())["text"] + " One more sentence here."}))
    generate_cached("niah_single_2", word_tokenizer, 1200, 3, 42, ("", ""), data)
    assert len(list((data / CACHE_FOLDER).iterdir())) == 4


def test_without_a_cache_folder_a_process_keeps_its_last_streams(word_tokenizer, ruler_data: Path,
                                                                  tmp_path: Path) -> None:
    """A warm worker's next job of the same task draws nothing again: the stream is kept in the
    process under the disk cache's key (a prefix for fewer samples; seed or data change it)."""
    from evaluators.ruler import cache

    data = shutil.copytree(ruler_data, tmp_path / "data")
    first = generate_cached("niah_single_2", word_tokenizer, 1200, 3, 42, ("", ""), data)
    counting = CountingTokenizer(word_tokenizer)
    assert generate_cached("niah_single_2", counting, 1200, 3, 42, ("", ""), data) == first
    assert rows(generate_cached("niah_single_2", counting, 1200, 2, 42, ("", ""), data)) == rows(first[:2])
    assert counting.calls == 0 and not (data / CACHE_FOLDER).exists()
    assert rows(generate_cached("niah_single_2", counting, 1200, 3, 7, ("", ""), data)) != rows(first)
    assert counting.calls > 0  # another seed: drawn
    for seed in range(cache.MEMO_STREAMS):  # least recently used out first
        generate_cached("niah_single_2", word_tokenizer, 1200, 1, 100 + seed, ("", ""), data)
    calls = counting.calls
    generate_cached("niah_single_2", counting, 1200, 3, 42, ("", ""), data)
    assert counting.calls > calls
