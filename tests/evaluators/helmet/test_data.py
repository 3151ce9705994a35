"""HELMET's data (evaluators/helmet/data.py) on crafted files in its layouts, checked against an
independent reading of HELMET's load_* functions written with the `datasets` library itself
(load_dataset("json"), shuffle(seed), filter, train_test_split: the calls HELMET makes), so
the samples, their order and their demonstrations are the ones HELMET's code draws."""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

import datasets
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, processors

from checkpoints.tokenizer import ByteTokenizer
from evaluators.errors import EvaluatorError
from evaluators.helmet import data, prompts
from evaluators.helmet.files import DATASETS
from evaluators.helmet.options import HelmetOptions
from tests.evaluators.helmet.helmet_files import write_helmet_files

datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def helmet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_helmet_files(tmp_path_factory.mktemp("helmet"), [4096, 8192])


def hf_json(path: Path, tmp: Path) -> datasets.Dataset:
    return datasets.load_dataset("json", data_files=str(path), cache_dir=str(tmp / "hf"))["train"]


def test_missing_files_are_named_with_where_to_get_them(tmp_path: Path, helmet_dir: Path) -> None:
    o = HelmetOptions(categories=["rag", "longqa"], input_max_length=[8192])
    lines = o.missing_files(tmp_path)
    text = "\n".join(lines)
    assert str(tmp_path / "helmet/data/kilt/nq-dev-multikilt_1000_k50_dep6.jsonl") in text
    assert str(tmp_path / "helmet/data/kilt/popqa_test_1000_k3_dep6.jsonl") in text
    assert "data.tar.gz" in text and "huggingface-cli download deepmind/narrativeqa" in text
    assert "meta-llama/Llama-2-7b-hf" in text  # the book tokenizer
    assert HelmetOptions(categories=["rag"], input_max_length=[8192]).missing_files(helmet_dir) == []
    beyond = HelmetOptions(categories=["recall"], input_max_length=[262144]).missing_files(helmet_dir)
    assert "json_kv/test_k3600_dep6.jsonl" in beyond[0]  # json_kv goes beyond 128k: its pairs scaled, file named
    with pytest.raises(ValueError, match="no HELMET setting for length 262144"):
        HelmetOptions(categories=["rag"], input_max_length=[262144])
    assert "no data directory" in HelmetOptions().missing_files(None)[0]


def test_knobs_are_the_configs() -> None:
    """A few numbers read off configs/*_short.yaml and configs/*.yaml by hand."""
    assert DATASETS["json_kv"].knob_at(65536) == 900 and DATASETS["json_kv"].knob_at(131072) == 1800
    assert DATASETS["kilt_hotpotqa"].test_file(Path("d"), 32768) == \
        Path("d/helmet/data/kilt/hotpotqa-dev-multikilt_1000_k220_dep3.jsonl")
    assert DATASETS["msmarco_rerank_psg"].knob_at(16384) == 130
    assert DATASETS["alce_qampari"].knob_at(65536) == 345
    assert DATASETS["narrativeqa"].knob_at(8192) == 7892 and DATASETS["infbench_qa_eng"].knob_at(65536) == 65326
    assert DATASETS["infbench_sum_eng"].knob_at(131072) == 129672 and DATASETS["multi_lexsum"].knob_at(16384) == 15684
    assert DATASETS["icl_nlu"].knob_at(131072) == 8296 and DATASETS["icl_trec_coarse"].knob_at(65536) == 3300
    o = HelmetOptions()
    assert (o.generation_for("infbench_sum_eng"), o.generation_for("ruler_niah_mk_3"), o.samples_for("icl_nlu"),
            o.samples_for("kilt_nq"), o.shots_for("kilt_nq"), o.shots_for("icl_nlu")) == (1200, 100, 500, 100, 2, 0)
    assert o.chat_for("narrativeqa") and o.chat_for("alce_asqa") and not o.chat_for("kilt_nq")
    assert not HelmetOptions(chat_template=False).chat_for("narrativeqa")
    assert not HelmetOptions(categories=["recall"]).chat_template_wanted()  # a base model may run recall as is


def test_json_kv_as_helmet_selects_it(helmet_dir: Path, tmp_path: Path) -> None:
    path = helmet_dir / "helmet/data/json_kv/test_k105_dep6.jsonl"
    got = data.load("json_kv", 8192, helmet_dir, shots=2, samples=3, seed=42)
    oracle = hf_json(path, tmp_path).shuffle(seed=42).select(range(3))
    assert [i["question"] for i in got.items] == oracle["question"]
    demos = oracle[0]["demos"][:2]
    assert got.items[0]["demos"] == f"Key: {demos[0][0]}\nCorresponding value: {demos[0][1]}\n\n" \
        f"Key: {demos[1][0]}\nCorresponding value: {demos[1][1]}\n\n"
    prompt = prompts.completion_prompt(got.templates, got.items[0])
    assert prompt == (f"{oracle[0]['context']}\n\nExtract the value corresponding to the specified key in the JSON "
                      f"object below.\n\n{got.items[0]['demos']}Key: {oracle[0]['question']}\nCorresponding value:")
    none = data.load("json_kv", 8192, helmet_dir, shots=0, samples=3, seed=42)
    assert none.items[0]["demos"] == ""


def oracle_qa(test: datasets.Dataset, demos: datasets.Dataset, n: int, shots: int, seed: int,
              popqa: bool = False) -> list[dict]:
    """load_qa as HELMET's code runs it (random.seed in run_test, datasets' shuffle and select)."""
    random.seed(seed)
    if popqa:
        test = test.filter(lambda x: math.log10(x["s_pop"]) < 3)
        demos = demos.filter(lambda x: math.log10(x["s_pop"]) < 3)
    key = "id" if "id" in test.column_names else "question"
    keys = set(random.sample(sorted(set(test[key])), min(n, len(set(test[key])))))
    test = test.filter(lambda x: x[key] in keys)
    out = []
    for sample in test:
        pool = demos.filter(lambda x, s=sample: x[key] != s[key]) if popqa else demos
        h = int(hashlib.sha256(str(sample[key]).encode("utf-8")).hexdigest(), 16) % 2**31
        shuffled = pool.shuffle(seed=h)
        seen, picked = set(), []
        for d in shuffled:
            if d[key] not in seen:
                seen.add(d[key])
                picked.append(d)
        picked = picked[:shots]
        docs = ["\n\n".join(f"Document (Title: {c['title']}): {c['text']}" for c in d["ctxs"]) for d in picked]
        text = "\n\n".join(f"{doc}\n\nQuestion: {d['question']}\nAnswer: {d['answers'][0]}"
                           for doc, d in zip(docs, picked, strict=True)) + "\n\n"
        out.append({"key": sample[key], "demos": text})
    return out


@pytest.mark.parametrize("name", ["kilt_nq", "kilt_popqa"])
def test_rag_questions_and_demos_as_helmet_draws_them(name: str, helmet_dir: Path, tmp_path: Path) -> None:
    d = DATASETS[name]
    got = data.load(name, 4096, helmet_dir, shots=2, samples=2, seed=42)
    oracle = oracle_qa(hf_json(d.test_file(helmet_dir, 4096), tmp_path), hf_json(d.demo_file(helmet_dir), tmp_path),
                       2, 2, 42, popqa=name == "kilt_popqa")
    assert [(i["id"], i["demos"]) for i in got.items] == [(o["key"], o["demos"]) for o in oracle]
    assert len(got.items) == 2 * 2  # every depth of a drawn key
    if name == "kilt_popqa":
        assert all(math.log10(i["s_pop"]) < 3 for i in got.items)
    item = got.items[0]
    assert item["answer"] == item["answers"]
    assert item["context"].startswith("Document (Title: ") and "\n\nDocument (Title: " in item["context"]
    assert prompts.completion_prompt(got.templates, item).endswith(f"\n\nQuestion: {item['question']}\nAnswer:")


def test_rerank_gold_ranking_k_values_and_demos(helmet_dir: Path) -> None:
    got = data.load("msmarco_rerank_psg", 8192, helmet_dir, shots=2, samples=2, seed=42)
    assert got.extra["k_values"] == [1, 5, 10]  # k <= the 12 passages of a crafted question
    item = got.items[0]
    labels = {q: int(label) for q, label in item["qrel"]}
    ranked = item["answer"].split(" > ")
    assert [labels[i] for i in ranked] == sorted(labels.values(), reverse=True)
    assert item["context"].startswith("[ID: ") and "Document (Title: T0)" in item["context"]
    assert item["demos"].count("\nRanking: ") == 2 and item["demos"].count("Query: demo query ") == 2
    assert item["question"] == f"q query {item['qid'][1:]}"


def test_alce_documents_and_demos(helmet_dir: Path) -> None:
    got = data.load("alce_asqa", 8192, helmet_dir, shots=2, samples=3, seed=42)
    assert len(got.items) == 3
    item = got.items[0]
    assert item["context"].count("Document [") == 30  # 8k: the first 30 documents
    assert item["context"].startswith("Document [1](Title: Doc ")
    rand = random.Random(42)  # random.seed(args.seed) before load_data: sample draws in file order
    spec = json.loads((helmet_dir / "helmet/prompts/asqa_revised.json").read_text())
    draws = [rand.sample(spec["demos"], 2) for _ in range(4)]
    order = data.permutation(4, 42)[:3]
    assert [i["question"] for i in got.items] == [f"Question {k}?" for k in order]
    first = draws[order[0]]
    assert item["demo_text"].startswith(f"{spec['instruction']}\n\nQuestion: {first[0]['question']}")
    assert item["demo_text"].endswith("\n\n\n") and item["demo_text"].count("Demo question") == 2
    assert prompts.completion_prompt(got.templates, item).endswith(f"{item['context']}\n\nAnswer:")


def test_icl_balance_label_mapping_and_nlu_split(helmet_dir: Path, tmp_path: Path) -> None:
    got = data.load("icl_trec_coarse", 4096, helmet_dir, shots=0, samples=6, seed=42)
    assert len(got.items) == 6
    test_labels = [i["label"] for i in got.items]
    assert sorted(test_labels) == list(range(6))  # balanced: one of each of the 6 labels
    item = got.items[0]
    lines = item["context"].split("\n\n")
    assert len(lines) == 200  # 4k: 200 shots
    labels = [int(line.rsplit("label: ", 1)[1]) for line in lines]
    assert sorted(set(labels)) == list(range(6))
    counts = [labels.count(v) for v in range(6)]
    assert max(counts) - min(counts) <= 1  # balanced demonstrations
    local = (int(hashlib.sha256(item["question"].encode("utf-8")).hexdigest(), 16) + 42) % 2**31
    mapping = list(range(6))
    random.seed(local)
    random.shuffle(mapping)
    assert item["answer"] == str(mapping[item["label"]])
    natural = data.load("icl_trec_coarse", 4096, helmet_dir, shots=0, samples=6, seed=42, natural_label=True)
    assert natural.items[0]["answer"] == f"C{natural.items[0]['label']}"
    assert prompts.completion_prompt(got.templates, item).startswith(
        'Use the provided mapping from the text to label to assign a label to the text. Only output "label: {label}" '
        "and nothing else. \n\n")
    # NLU's split is datasets' train_test_split(test_size=0.1, seed)
    path = next((helmet_dir / "helmet/hub/xingkunliuxtracta/nlu_evaluation_data").rglob("*.parquet"))
    whole = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "hf"))
    split = whole.train_test_split(test_size=0.1, seed=42)
    train_idx, test_idx = data.train_test_split(len(whole), 0.1, 42)
    assert [whole[i]["text"] for i in test_idx] == split["test"]["text"]
    assert [whole[i]["text"] for i in train_idx] == split["train"]["text"]


def llama_like(tmp_path: Path) -> Path:
    """A word-level tokenizer.json that adds BOS as Llama's does (its offsets real)."""
    words = ["<s>", "<unk>", "[UNK]", "...", "[the", "rest", "of", "the", "text", "is", "omitted]"] + \
        [f"w{i}" for i in range(50)]
    tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_books_truncate_as_truncate_llama2(tmp_path: Path) -> None:
    books = data.Books.llama2(llama_like(tmp_path))
    assert books.postfix == 9  # BOS + the 8 words of " ... [the rest of the text is omitted]"
    text = " ".join(f"w{i}" for i in range(30))
    assert books.count(text) == 31
    assert books.truncate(text, 31) == text
    # over the limit: cut after token limit - postfix (BOS is token 0), the postfix appended
    assert books.truncate(text, 20) == " ".join(f"w{i}" for i in range(11)) + data.POSTFIX
    model = data.Books.of_model(ByteTokenizer())  # a byte a token, BOS first: the same cut through decode
    assert model.postfix == 1 + len(data.POSTFIX)
    assert model.truncate("abcdefghijklmnopqrstuvwxyz" * 3, 50) == "abcdefghijk" + data.POSTFIX


def test_books_filtered_and_truncated(helmet_dir: Path) -> None:
    books = data.Books.of_model(ByteTokenizer())
    nqa = data.load("narrativeqa", 8192, helmet_dir, shots=2, samples=3, seed=42, books=lambda: books)
    assert nqa.items and all(i["id"] in ("doc0", "doc1") for i in nqa.items)  # doc2's story is under 131072 tokens
    assert all(books.count(i["context"]) <= 7892 + 1 and i["context"].endswith(data.POSTFIX) for i in nqa.items)
    assert nqa.items[0]["demo"].startswith("For example:\n\nQuestion: Train question ")
    assert nqa.items[0]["answer"] == ["the hero", "a hero"]
    lex = data.load("multi_lexsum", 8192, helmet_dir, shots=2, samples=5, seed=42, books=lambda: books)
    assert [i["id"] for i in lex.items] == ["case0"]  # case1 has no short summary, 2-3 are short
    assert lex.items[0]["demo"].startswith("Example summaries:\n\nSummary: Train summary ")
    choice = data.load("infbench_choice_eng", 8192, helmet_dir, shots=2, samples=5, seed=42, books=lambda: books)
    assert choice.items[0]["answer"] == ["B", "B. hero"] and choice.items[0]["options"].startswith("A. cat\nB. hero")
    # the demonstrations: the other samples shuffled with the seed (datasets' shuffle), their first two
    others = [r for r in range(3) if r != choice.items[0]["id"]]
    first = [others[i] for i in data.permutation(2, 42)][:2]
    assert choice.items[0]["demo"] == "For example:\n\n" + "\n\n".join(
        f"[story text]\nQuestion: Who {k}?\nOptions:\nA. cat\nB. hero\nC. dog\nD. fox\nAnswer: B" for k in first) + \
        "\n\nNow, read the following story:\n\n"
    summ = data.load("infbench_sum_eng", 8192, helmet_dir, shots=2, samples=5, seed=42, books=lambda: books)
    assert "Summary: The hero walks" in summ.items[0]["demo"]


def test_ruler_files(helmet_dir: Path) -> None:
    got = data.load("ruler_niah_mv", 8192, helmet_dir, shots=2, samples=2, seed=42)
    item = got.items[0]
    assert item["answer"] == item["outputs"] and item["question"] == item["query"]
    assert prompts.completion_prompt(got.templates, item).endswith(
        f"What are all the special magic numbers for {item['query']} mentioned in the provided text?\nThe special "
        f"magic numbers for {item['query']} mentioned in the provided text are")


def test_a_files_template_reads_plain_fields_only() -> None:
    assert prompts.fill("{a} and {b}", "t", a=1, b="x") == "1 and x"
    with pytest.raises(EvaluatorError, match="not a plain name"):
        prompts.fill("{a.__class__}", "t", a=1)
    with pytest.raises(EvaluatorError, match="conversion"):
        prompts.fill("{a!r}", "t", a=1)
    with pytest.raises(EvaluatorError, match="lacks"):
        prompts.fill("{c}", "t", a=1)


def test_a_bad_file_is_refused_naming_it(tmp_path: Path) -> None:
    root = write_helmet_files(tmp_path, [8192])
    path = root / "helmet/data/json_kv/test_k105_dep6.jsonl"
    path.write_text(json.dumps({"context": "x"}) + "\n")
    with pytest.raises(EvaluatorError, match=r"test_k105_dep6.jsonl.*lacks"):
        data.load("json_kv", 8192, root, shots=2, samples=3, seed=42)
