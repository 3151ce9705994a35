"""Crafted HELMET data in exactly the layouts HELMET reads (never the real data): the files of
its data.tar.gz under <data>/helmet/data, ALCE's prompt files under <data>/helmet/prompts, and
snapshots of the hub datasets it loads at run time under <data>/helmet/hub/<repo> (parquet as
the hub's parquet conversion writes it, with the ClassLabel names in the `huggingface` schema
metadata; InfiniteBench's JSON lines). Small: a few questions per file, books just over the
length filters in bytes (the demo checkpoints' byte tokenizer counts a byte a token)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from evaluators.helmet.files import DATASETS, LENGTHS


def jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def parquet(path: Path, rows: list[dict[str, Any]], labels: dict[str, list[str]] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    if labels:
        features = {k: {"names": v, "_type": "ClassLabel"} for k, v in labels.items()}
        table = table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, path)


def kv_row(i: int, n: int = 4) -> dict[str, Any]:
    pairs = {f"key-{i}-{j:04d}": f"value-{i}-{j:04d}" for j in range(n)}
    key = f"key-{i}-{n // 2:04d}"
    return {"context": "JSON data:\n" + json.dumps(pairs, indent=1), "question": key, "answer": pairs[key],
            "demos": [[f"dk-{i}-a", f"dv-{i}-a"], [f"dk-{i}-b", f"dv-{i}-b"], [f"dk-{i}-c", f"dv-{i}-c"]],
            "num_kvs": n, "depth": 0.5}


def ruler_row(i: int, multi: bool) -> dict[str, Any]:
    outputs = [f"{1000000 + i}", f"{2000000 + i}"] if multi else [f"{1000000 + i}"]
    needles = " ".join(f"One of the special magic numbers for word{i} is: {o}." for o in outputs)
    return {"index": i, "context": f"Grass is green. {needles} The sky is blue.", "query": f"word{i}",
            "type_needle_v": "numbers", "outputs": outputs, "length": 100}


def ctx(title: str, text: str, has_answer: bool) -> dict[str, Any]:
    return {"id": f"p-{title}", "title": title, "text": text, "has_answer": has_answer}


def kilt_rows(prefix: str, questions: int, depths: int, pop: bool = False) -> list[dict[str, Any]]:
    rows = []
    for q in range(questions):
        for depth in range(depths):
            ctxs = [ctx(f"{prefix}{q}-{k}", f"Passage {k} about topic {q}.", False) for k in range(3)]
            ctxs.insert(depth % 4, ctx(f"{prefix}{q}-gold", f"The answer to question {q} is Gold{q}.", True))
            row = {"id": f"{prefix}{q}", "question": f"What is the answer to question {q}?",
                   "answers": [f"Gold{q}", f"gold {q}"], "ctxs": ctxs, "depth": depth}
            if pop:
                row["s_pop"] = [50, 5000][q % 2]  # log10: 1.7 and 3.7 (the second above the threshold 3)
            rows.append(row)
    return rows


def msmarco_rows(prefix: str, questions: int, depths: int) -> list[dict[str, Any]]:
    rows = []
    for q in range(questions):
        for _ in range(depths):
            ctxs = [{"id": str(100 * q + k), "title": f"T{k}", "text": f"Document {k} on query {q}.", "label": k % 3}
                    for k in range(12)]
            rows.append({"qid": f"{prefix}{q}", "query": f"{prefix} query {q}", "ctxs": ctxs})
    return rows


def alce_prompt(instruction: str) -> dict[str, Any]:
    doc = {"title": "Demo doc", "text": "A demo document."}
    return {"instruction": instruction,
            "demo_prompt": "{instruction}\n\nQuestion: {question}\n\n{context}\n\nAnswer: {answer}",
            "doc_prompt": "Document [{ID}](Title: {title}): {text}\n",
            "demos": [{"question": f"Demo question {i}?", "answer": f"Demo answer {i} [1].", "docs": [doc, doc]}
                      for i in range(4)]}


def alce_rows(kind: str, questions: int) -> list[dict[str, Any]]:
    rows = []
    for q in range(questions):
        docs = [{"title": f"Doc {q}-{k}", "text": f"Fact {k} of question {q}: the answer is A{q}."} for k in range(40)]
        row = {"question": f"Question {q}?", "docs": docs, "answer": f"A{q}"}
        if kind == "asqa":
            row["qa_pairs"] = [{"short_answers": [f"A{q}"], "question": f"Question {q}?"}]
        else:
            row["answers"] = [[f"A{q}"], [f"B{q}"]]
        rows.append(row)
    return rows


def book(i: int, size: int) -> str:
    line = f"Chapter of book {i}: the hero walked on. "
    return (line * (size // len(line) + 1))[:size]


LABELS = {"coarse_label": [f"C{i}" for i in range(6)], "fine_label": [f"F{i}" for i in range(50)],
          "label77": [f"B{i}" for i in range(77)], "intent": [f"I{i}" for i in range(151)],
          "label68": [f"N{i}" for i in range(68)]}


def icl_rows(count: int, label: str, labels: int, offset: int = 0, **more: Any) -> list[dict[str, Any]]:
    return [{"text": f"utterance {offset + i} of class {i % labels}", label: i % labels,
             **{k: i % n for k, n in more.items()}} for i in range(count)]


def write_helmet_files(data: Path, lengths: list[int] | None = None, book_chars: int = 140_000) -> Path:
    """Every dataset's files at `lengths` (default all) under <data>/helmet; returns <data>."""
    root = data / "helmet"
    for n in lengths or LENGTHS:
        kv = DATASETS["json_kv"].knob_at(n)
        jsonl(root / f"data/json_kv/test_k{kv}_dep6.jsonl", [kv_row(i) for i in range(5)])
        for name in ("ruler_niah_mk_2", "ruler_niah_mk_3", "ruler_niah_mv", "ruler_niah_s_1", "ruler_cwe",
                     "ruler_vt", "ruler_qa_1"):
            path = DATASETS[name].test_file(data, n)
            jsonl(path, [ruler_row(i, name == "ruler_niah_mv") for i in range(4)])
        k = DATASETS["kilt_nq"].knob_at(n)
        for name in ("nq", "triviaqa"):
            jsonl(root / f"data/kilt/{name}-dev-multikilt_1000_k{k}_dep6.jsonl", kilt_rows(name, 4, 2))
        jsonl(root / f"data/kilt/hotpotqa-dev-multikilt_1000_k{k}_dep3.jsonl", kilt_rows("hotpot", 4, 3))
        jsonl(root / f"data/kilt/popqa_test_1000_k{k}_dep6.jsonl", kilt_rows("pop", 6, 2, pop=True))
        jsonl(root / f"data/msmarco/test_reranking_data_k{DATASETS['msmarco_rerank_psg'].knob_at(n)}_dep3.jsonl",
              msmarco_rows("q", 4, 2))
    for name in ("nq", "triviaqa"):
        jsonl(root / f"data/kilt/{name}-train-multikilt_1000_k3_dep6.jsonl", kilt_rows(f"{name}-train", 5, 1))
    jsonl(root / "data/kilt/hotpotqa-train-multikilt_1000_k3_dep3.jsonl", kilt_rows("hotpot-train", 5, 1))
    jsonl(root / "data/kilt/popqa_test_1000_k3_dep6.jsonl", kilt_rows("pop", 6, 1, pop=True))
    jsonl(root / "data/msmarco/test_reranking_data_k10_dep3.jsonl", msmarco_rows("demo", 12, 1))
    (root / "data/alce").mkdir(parents=True, exist_ok=True)
    (root / "data/alce/asqa_eval_gtr_top2000.json").write_text(json.dumps(alce_rows("asqa", 4)))
    (root / "data/alce/qampari_eval_gtr_top2000.json").write_text(json.dumps(alce_rows("qampari", 4)))
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    (root / "prompts/asqa_revised.json").write_text(json.dumps(alce_prompt("Write an accurate answer with citations.")))
    (root / "prompts/qampari_revised.json").write_text(json.dumps(alce_prompt("List the answers with citations.")))

    punkt = data / "nltk_data" / "tokenizers" / "punkt_tab" / "english"  # NLTK's punkt, no learned parameters
    punkt.mkdir(parents=True, exist_ok=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (punkt / name).write_text("")

    hub = root / "hub"
    docs = [{"id": f"doc{i}", "kind": "book", "text": book(i, book_chars if i < 2 else 1000)} for i in range(3)]
    qa = [{"document": docs[i % 3], "question": {"text": f"Who walked in book {i % 3}, question {i}?"},
           "answers": [{"text": "the hero"}, {"text": "a hero"}]} for i in range(6)]
    parquet(hub / "deepmind/narrativeqa/data/test-00000-of-00001.parquet", qa)
    parquet(hub / "deepmind/narrativeqa/data/train-00000-of-00001.parquet",
            [{"document": docs[2], "question": {"text": f"Train question {i}?"}, "answers": [{"text": f"ans {i}"}]}
             for i in range(4)])
    lex = [{"id": f"case{i}", "sources": [book(i, book_chars // 2), book(i + 10, book_chars // 2)] if i < 2
            else ["short"], "summary/short": f"Summary of case {i}." if i != 1 else None,
            "summary/long": f"The long summary of case {i}."} for i in range(4)]
    jsonl(root / "data/multi_lexsum/multi_lexsum_val.jsonl",
          [{"id": f"case{i}", "summary/short_keypoints": [f"Case {i} was filed.", f"Case {i} settled."]}
           for i in range(4)])
    jsonl(root / "data/infbench/longbook_sum_eng_keypoints.jsonl",
          [{"id": i, "keypoints": [f"The hero walks {i}.", "The end."]} for i in range(3)])
    parquet(hub / "allenai/multi_lexsum/v20230518/validation/0000.parquet", lex)
    parquet(hub / "allenai/multi_lexsum/v20230518/train/0000.parquet",
            [{"id": f"t{i}", "sources": ["x"], "summary/short": f"Train summary {i}."} for i in range(4)])
    inf = hub / "xinrongzhang2022/InfiniteBench"
    jsonl(inf / "longbook_qa_eng.jsonl", [{"id": i, "context": book(i, book_chars // 2), "input": f"Who walks {i}?",
                                           "answer": ["the hero"], "options": []} for i in range(3)])
    jsonl(inf / "longbook_choice_eng.jsonl", [{"id": i, "context": book(i, book_chars // 2), "input": f"Who {i}?",
                                               "answer": ["hero"], "options": ["cat", "hero", "dog", "fox"]}
                                              for i in range(3)])
    jsonl(inf / "longbook_sum_eng.jsonl", [{"id": i, "context": book(i, book_chars // 2), "input": "",
                                            "answer": [f" The hero walks {i}. "], "options": []} for i in range(3)])
    parquet(hub / "CogComp/trec/default/train/0000.parquet", icl_rows(60, "coarse_label", 6, fine_label=50),
            {"coarse_label": LABELS["coarse_label"], "fine_label": LABELS["fine_label"]})
    parquet(hub / "CogComp/trec/default/test/0000.parquet", icl_rows(12, "coarse_label", 6, 1000, fine_label=50),
            {"coarse_label": LABELS["coarse_label"], "fine_label": LABELS["fine_label"]})
    parquet(hub / "PolyAI/banking77/data/train-00000-of-00001.parquet", icl_rows(160, "label", 77),
            {"label": LABELS["label77"]})
    parquet(hub / "PolyAI/banking77/data/test-00000-of-00001.parquet", icl_rows(10, "label", 77, 1000),
            {"label": LABELS["label77"]})
    parquet(hub / "clinc/clinc_oos/plus/train-00000-of-00001.parquet", icl_rows(160, "intent", 151),
            {"intent": LABELS["intent"]})
    parquet(hub / "clinc/clinc_oos/plus/validation-00000-of-00001.parquet", icl_rows(10, "intent", 151, 1000),
            {"intent": LABELS["intent"]})
    parquet(hub / "xingkunliuxtracta/nlu_evaluation_data/default/train/0000.parquet",
            [{**r, "scenario": "x"} for r in icl_rows(200, "label", 68)], {"label": LABELS["label68"]})
    return data
