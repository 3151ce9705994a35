"""HELMET's data read as its data.py reads it (docs/protocols/helmet.md, "Data"): the files of
its data.tar.gz and snapshots of the hub datasets it loads at run time, each dataset's test
samples selected and its demonstrations drawn as its load_* function selects and draws them,
so a sample here is the test item HELMET builds (the fields its templates and scoring read).

HELMET draws with three generators, each reproduced: Python's `random` seeded with --seed
(RAG's and re-ranking's `random.sample` of question keys, ALCE's demonstrations, ICL's
balanced draws and label mapping), `datasets`' shuffle (`np.random.default_rng(seed)
.permutation(n)`: json_kv, RULER, ALCE, InfiniteBench, Multi-LexSum selection and the
per-question shuffles of RAG and re-ranking demos, seeded by a sha256 of the question) and
`train_test_split` (NLU). Two draws HELMET leaves unseeded (NarrativeQA's and Multi-LexSum's
demonstrations: `train.shuffle()` without a seed) are seeded here by the sample's id.
Nothing read runs code: JSON lines, JSON, parquet (pyarrow) and tokenizer.json only."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.data import json_objects
from evaluators.errors import EvaluatorError
from evaluators.helmet import prompts
from evaluators.helmet.files import DATA_HOWTO, DATASETS, Dataset, Hub, hub_split
from evaluators.provenance import note_files

POSTFIX = " ... [the rest of the text is omitted]"  # truncate_llama2's postfix_text
RERANK_K = (1, 5, 10, 20, 50, 100, 200, 500, 1000)


@dataclass
class Loaded:
    """One dataset at one length: HELMET's test items in its order, its templates and what
    scoring needs beyond an item (re-ranking's k values)."""

    dataset: str
    length: int
    items: list[dict[str, Any]]
    templates: prompts.Templates
    extra: dict[str, Any] = field(default_factory=dict)


# --- the generators HELMET draws with --------------------------------------------------


def permutation(n: int, seed: int) -> list[int]:
    """`datasets.Dataset.shuffle(seed=seed)`'s order of n rows."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def shuffled(rows: list[Any], seed: int) -> list[Any]:
    return [rows[i] for i in permutation(len(rows), seed)]


def sha_seed(text: str) -> int:
    """HELMET's per-question seed: sha256 of the key, modulo 2**31."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 2**31


def first_per_key(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """drop_duplicates: the first row of each key, in order."""
    seen: set[Any] = set()
    out = []
    for r in rows:
        if r[key] not in seen:
            seen.add(r[key])
            out.append(r)
    return out


def train_test_split(n: int, test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """`datasets.Dataset.train_test_split(test_size, seed)`'s (train, test) row indices."""
    n_test = math.ceil(test_size * n)
    order = permutation(n, seed)
    return order[n_test:], order[:n_test]


def balance_labels(rows: list[dict[str, Any]], label: str, shots: int, seed: int) -> list[dict[str, Any]]:
    """load_icl's balance_labels: `shots` rows, rounds of one row per label (labels in the
    order they first appear), each round shuffled, all from one `random.Random(seed)`."""
    rand = random.Random(seed)
    by_label: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        by_label.setdefault(r[label], []).append(r)
    rounds = math.ceil(shots / len(by_label))
    out: list[list[dict[str, Any]]] = [[] for _ in range(rounds)]
    for samples in by_label.values():
        indices = rand.sample(range(len(samples)), rounds % len(samples))
        while len(indices) < rounds:
            indices += rand.sample(range(len(samples)), min(rounds - len(indices), len(samples)))
        for i, idx in enumerate(indices):
            out[i].append(samples[idx])
    for group in out:
        rand.shuffle(group)
    return [r for group in out for r in group][:shots]


# --- files ----------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise EvaluatorError(f"helmet: missing data file {path}; {DATA_HOWTO}")
    return [r for _, r in json_objects(path, "a HELMET record")]


def read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise EvaluatorError(f"helmet: missing data file {path}; {DATA_HOWTO}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise EvaluatorError(f"helmet: {path} is not a JSON file ({e}); {DATA_HOWTO}") from None


def read_records(path: Path) -> list[dict[str, Any]]:
    """A test file: JSON lines, or a .json (HELMET reads ALCE's as a list of records and a
    KILT .json as {"data": [...]})."""
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    data = read_json(path, "records")
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise EvaluatorError(f"helmet: {path} holds no list of records; {DATA_HOWTO}")
    return data


def need(row: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise EvaluatorError(f"helmet: {where}: a record lacks {missing} (it has {sorted(row)[:12]}); is it "
                             f"HELMET's file? {DATA_HOWTO}")


def hub_rows(hub: Hub, data_dir: Path, split: str, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """A hub dataset's split from its snapshot: parquet files (pyarrow) or JSON lines, in file order."""
    files = hub.files(data_dir, split)
    if not files:
        raise EvaluatorError(f"helmet: no {split} split of {hub.repo} under {hub.folder(data_dir)}; {hub.howto()}")
    note_files(files)
    rows: list[dict[str, Any]] = []
    for path in files:
        if path.suffix == ".jsonl":
            got = read_jsonl(path)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(path)
            except (pa.ArrowInvalid, OSError) as e:
                raise EvaluatorError(f"helmet: {path} is not a readable parquet file ({e}); {hub.howto()}") from None
            absent = [c for c in columns if c not in table.column_names]
            if absent:
                raise EvaluatorError(f"helmet: {path} has no column(s) {absent} (it has {table.column_names}); "
                                     f"{hub.howto()}")
            got = table.select(list(columns)).to_pylist()
        for r in got:
            need(r, columns, str(path))
        rows += got
    return rows


def label_names(hub: Hub, data_dir: Path, split: str, column: str) -> list[str]:
    """A ClassLabel's names from the parquet files' `huggingface` schema metadata (what
    `features[column].names` reads in HELMET): the natural_label variant's labels."""
    import pyarrow.parquet as pq

    for path in hub.files(data_dir, split):
        meta = (pq.read_schema(path).metadata or {}).get(b"huggingface")
        if meta:
            try:
                names = json.loads(meta)["info"]["features"][column]["names"]
            except (ValueError, KeyError, TypeError):
                break
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return names
    raise EvaluatorError(f"helmet: natural_label needs the label names of {hub.repo}'s {column!r}, which its parquet "
                         f"files' metadata does not hold; {hub.howto()}")


# --- books: counted and truncated as truncate_llama2 does ---------------------------------


class Books:
    """The tokenizer books are filtered and truncated with: Llama-2's tokenizer.json through
    `tokenizers` (HELMET's truncate_llama2 and filter_length, offsets and all), or the model's
    (encode, and the kept ids decoded). Counts are kept by text: a book with many questions
    is tokenized once."""

    def __init__(self, encode: Callable[[str], tuple[list[int], list[tuple[int, int]] | None]],
                 decode: Callable[[list[int]], str] | None = None) -> None:
        self.encode, self.decode = encode, decode
        self._cache: dict[str, tuple[list[int], list[tuple[int, int]] | None]] = {}  # the last few encodings
        self._counts: dict[str, int] = {}  # every text's count, for the run (lengths share them)
        self.postfix = len(encode(POSTFIX)[0])

    @classmethod
    def llama2(cls, path: Path) -> Books:
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers' own error types
            raise EvaluatorError(f"helmet: {path} is not a tokenizer.json ({e})") from None

        def encode(text: str) -> tuple[list[int], list[tuple[int, int]]]:
            enc = tok.encode(text)
            return enc.ids, enc.offsets

        return cls(encode)

    @classmethod
    def of_model(cls, tokenizer: Any) -> Books:
        return cls(lambda text: (tokenizer.encode(text), None), tokenizer.decode)

    def _encoded(self, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self._cache:
            if len(self._cache) >= 8:  # a book's ids and offsets are large: keep a few
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = self.encode(text)
            self._counts[key] = len(self._cache[key][0])
        return self._cache[key]

    def count(self, text: str) -> int:
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self._counts:
            self._encoded(text)
        return self._counts[key]

    def truncate(self, text: str, limit: int) -> str:
        """truncate_llama2: a text over `limit` tokens cut after token limit - len(postfix) and
        the postfix appended."""
        ids, offsets = self._encoded(text)
        if len(ids) <= limit:
            return text
        keep = limit - self.postfix
        if offsets is not None:
            return text[:offsets[keep][1]] + POSTFIX
        assert self.decode is not None
        return self.decode(ids[:keep + 1]) + POSTFIX


# --- the load_* functions -----------------------------------------------------------------


def load_json_kv(d: Dataset, path: Path, shots: int, samples: int, seed: int) -> list[dict[str, Any]]:
    rows = read_jsonl(path)
    for r in rows:
        need(r, ("context", "question", "answer", "demos", "num_kvs"), str(path))
    items = []
    for r in rows:
        demos = "\n\n".join(prompts.JSON_KV_DEMO.format(key=k, value=" " + v) for k, v in r["demos"][:shots])
        items.append({**r, "demos": demos + ("\n\n" if shots > 0 else ""), "k": r["num_kvs"]})
    return shuffled(items, seed)[:samples]


def load_ruler(path: Path, samples: int, seed: int) -> list[dict[str, Any]]:
    rows = read_jsonl(path)
    items = []
    for r in rows:
        need(r, ("context",), str(path))
        if "answer" not in r and "outputs" not in r:
            raise EvaluatorError(f"helmet: {path}: a record has neither answer nor outputs; {DATA_HOWTO}")
        example = r.get("example", "")
        items.append({**r, "question": r["query"] if "query" in r else r.get("question", ""),
                      "example": example + "\n\n" if example else "",
                      "answer": r["answer"] if "answer" in r else r["outputs"]})
    return shuffled(items, seed)[:samples]


def _passages(ctxs: list[dict[str, Any]], template: str) -> str:
    return "\n\n".join(template.format(**c) for c in ctxs)


def load_qa(d: Dataset, path: Path, demo_path: Path, shots: int, samples: int, seed: int,
            popularity_threshold: float) -> list[dict[str, Any]]:
    """load_qa (KILT NQ, TriviaQA, HotpotQA, PopQA): `samples` question keys drawn with
    random.sample after random.seed(seed), every row of those keys kept (one per depth)."""
    rows, demos = read_records(path), read_records(demo_path)
    for r in rows + demos:
        need(r, ("question", "answers", "ctxs"), str(path))
    if d.name == "kilt_popqa":
        rows = [r for r in rows if math.log10(r["s_pop"]) < popularity_threshold]
        demos = [r for r in demos if math.log10(r["s_pop"]) < popularity_threshold]
    key = "id" if any("id" in r for r in rows) else "question"
    keys = sorted({r[key] for r in rows})
    chosen = set(random.Random(seed).sample(keys, min(samples, len(keys))))
    rows = [r for r in rows if r[key] in chosen]
    items = []
    for r in rows:
        text = ""
        if shots > 0:
            pool = [x for x in demos if x[key] != r[key]] if d.name == "kilt_popqa" else demos
            picked = first_per_key(shuffled(pool, sha_seed(str(r[key]))), key)[:shots]
            if len(picked) < shots:
                raise EvaluatorError(f"helmet: {demo_path} has {len(picked)} distinct demonstrations; {shots} needed")
            text = "\n\n".join(prompts.QA_DEMO.format(documents=_passages(x["ctxs"], prompts.QA_PASSAGE),
                                                      question=x["question"], answer=x["answers"][0])
                               for x in picked) + "\n\n"
        context = _passages(r["ctxs"], prompts.QA_PASSAGE) if r["ctxs"] else ""
        items.append({**r, "demos": text, "context": context, "answer": r["answers"]})
    return items


def load_rerank(path: Path, demo_path: Path, shots: int, samples: int, seed: int) -> tuple[list[dict[str, Any]],
                                                                                            list[int]]:
    """load_msmarco_rerank: the question keys drawn as load_qa draws them; the gold ranking by
    label; demonstrations from the demo file without the test questions when it holds more
    than twice as many rows."""
    rows, demos = read_records(path), read_records(demo_path)
    for r in rows + demos:
        need(r, ("qid", "query", "ctxs"), str(path))
    key = "qid" if any("qid" in r for r in rows) else "query"
    keys = sorted({r[key] for r in rows})
    chosen = set(random.Random(seed).sample(keys, min(samples, len(keys))))
    rows = [r for r in rows if r[key] in chosen]
    k_values = [k for k in RERANK_K if rows and k <= len(rows[0]["ctxs"])]
    filtered = len(demos) > 2 * len(rows)
    if filtered:
        qids = {r["qid"] for r in rows}
        demos = [x for x in demos if x["qid"] not in qids]
    items = []
    for r in rows:
        template = prompts.RERANK_PASSAGE if "title" in r["ctxs"][0] else prompts.RERANK_PASSAGE_UNTITLED
        gold = " > ".join(c["id"] for c in sorted(r["ctxs"], key=lambda c: c["label"], reverse=True))
        text = ""
        if shots > 0:
            pool = demos if filtered else [x for x in demos if x["qid"] != r["qid"]]
            picked = first_per_key(shuffled(pool, sha_seed(r["qid"])), "qid")[:shots]
            for x in picked:
                ranking = " > ".join(c["id"] for c in sorted(x["ctxs"], key=lambda c: c["label"], reverse=True))
                text += _passages(x["ctxs"], template) + f"\n\nQuery: {x['query']}\nRanking: {ranking}" + "\n\n"
        rest = {k: v for k, v in r.items() if k not in ("query", "ctxs")}
        items.append({**rest, "context": _passages(r["ctxs"], template), "question": r["query"], "demos": text,
                      "answer": gold, "qrel": [[c["id"], str(c["label"])] for c in r["ctxs"]]})
    return items, k_values


def load_alce(d: Dataset, path: Path, prompt_path: Path, docs: int, shots: int, samples: int,
              seed: int) -> list[dict[str, Any]]:
    """load_alce: the first `docs` documents of each question; its demonstrations drawn with
    random.sample in file order after random.seed(seed); then the samples drawn as eval.py's
    shuffle(seed).select does."""
    spec = read_json(prompt_path, "ALCE prompts")
    if not isinstance(spec, dict) or not all(isinstance(spec.get(k), str) for k in
                                             ("instruction", "demo_prompt", "doc_prompt")) \
            or not isinstance(spec.get("demos"), list):
        raise EvaluatorError(f"helmet: {prompt_path} is not an ALCE prompt file (instruction, demo_prompt, doc_prompt, "
                             f"demos); {DATA_HOWTO}")
    rows = read_records(path)
    rand = random.Random(seed)
    where = str(prompt_path)

    def documents(ds: list[dict[str, Any]]) -> str:
        return "\n\n".join(prompts.fill(spec["doc_prompt"], where, **{**x, "ID": i + 1}) for i, x in enumerate(ds))

    items = []
    for r in rows:
        need(r, ("question", "docs"), str(path))
        if shots > len(spec["demos"]):
            raise EvaluatorError(f"helmet: {prompt_path} has {len(spec['demos'])} demonstrations; {shots} needed")
        text = "\n\n\n".join(
            prompts.fill(spec["demo_prompt"], where, **{**demo, "instruction": spec["instruction"],
                                                       "context": documents(demo.get("docs", []))})
            for demo in rand.sample(spec["demos"], shots))
        if shots > 0:
            text += "\n\n\n"
        items.append({**r, "context": documents(r["docs"][:docs]), "demo_text": text,
                      "instruction": spec["instruction"]})
    return shuffled(items, seed)[:samples]


def _book_demo(rows: list[dict[str, Any]], shots: int, seed: int, key: str) -> list[dict[str, Any]]:
    """The unseeded `train.shuffle().select(range(shots))` of NarrativeQA and Multi-LexSum,
    seeded here by the sample's key."""
    return shuffled(rows, (sha_seed(key) + seed) % 2**31)[:shots]


def load_narrativeqa(data_dir: Path, books: Books, limit: int, shots: int, samples: int,
                     seed: int) -> list[dict[str, Any]]:
    """load_narrativeqa: the test split shuffled with the seed, questions whose story is over
    131072 book tokens, demonstrations of train questions, the story truncated to `limit`."""
    hub = hub_split(DATASETS["narrativeqa"], "test")
    test = hub_rows(hub, data_dir, "test", ("document", "question", "answers"))
    train = hub_rows(hub, data_dir, "train", ("question", "answers")) if shots > 0 else []
    out = []
    for r in shuffled(test, seed):
        story = r["document"]["text"]
        if books.count(story) <= 131072:
            continue
        demo = ""
        if shots > 0:
            qa = [f"Question: {x['question']['text']}\nAnswer: {x['answers'][0]['text']}"
                  for x in _book_demo(train, shots, seed, r["question"]["text"] + r["document"].get("id", ""))]
            demo = "For example:\n\n" + "\n\n".join(qa) + "\n\nNow, use the following story to answer the question:\n\n"
        out.append({"id": r["document"].get("id", ""), "context": books.truncate(story, limit),
                    "question": r["question"]["text"], "answer": [a["text"] for a in r["answers"]], "demo": demo})
        if len(out) == samples:  # filters keep order: the first `samples` are the ones HELMET selects
            break
    return out


def load_multi_lexsum(data_dir: Path, books: Books, limit: int, shots: int, samples: int,
                      seed: int) -> list[dict[str, Any]]:
    hub = hub_split(DATASETS["multi_lexsum"], "validation")
    columns = ("id", "sources", "summary/short", "summary/long")
    test = [r for r in hub_rows(hub, data_dir, "validation", columns) if r["summary/short"] is not None]
    train = [r for r in hub_rows(hub, data_dir, "train", columns[:3]) if r["summary/short"] is not None] \
        if shots > 0 else []
    kept = []
    for r in test:
        context = "\n\n".join(r["sources"])
        if books.count(context) < 65536:
            continue
        demo = ""
        if shots > 0:
            demo = "Example summaries:\n\n" + "\n\n".join(f"Summary: {x['summary/short']}" for x in
                                                          _book_demo(train, shots, seed, str(r["id"]))) + \
                "\n\nNow, write a summary of the following legal documents.\n"
        kept.append({"id": r["id"], "context": books.truncate(context, limit), "demo": demo,
                     "answer": r["summary/short"], "question": "", "summary/long": r["summary/long"]})
    return shuffled(kept, seed)[:samples] if len(kept) > samples else kept


def load_infbench(name: str, data_dir: Path, books: Books, limit: int, shots: int, samples: int,
                  seed: int) -> list[dict[str, Any]]:
    """load_infbench: each sample's demonstrations the first `shots` of the other samples
    shuffled with the seed, books of at least 65536 tokens truncated to `limit`, then the
    samples drawn with shuffle(seed)."""
    task = name.removeprefix("infbench_")
    split = f"longbook_{task}"
    rows = hub_rows(hub_split(DATASETS[name], split), data_dir, split, ("id", "context", "input", "answer"))
    items = []
    for r in rows:
        item = {**r, "question": r["input"], "demo": ""}
        if task == "choice_eng":
            options = r.get("options") or []
            if len(options) < 4 or r["answer"][0] not in options:
                raise EvaluatorError(f"helmet: {name} row {r['id']}: options must hold the answer among four")
            letter = chr(ord("A") + options.index(r["answer"][0]))
            item.update(options="A. {}\nB. {}\nC. {}\nD. {}".format(*options),
                        answer=[letter, f"{letter}. {r['answer'][0]}"])
        items.append(item)
    if shots > 0:
        for item in items:
            others = shuffled([x for x in items if x["id"] != item["id"]], seed)[:shots]
            if task == "sum_eng":
                demo = "\n\n".join(f"[story text]\nSummary: {x['answer'][0].strip()}" for x in others)
            else:
                demo = "\n\n".join(prompts.INFBENCH_DEMOS[task].format(**x) for x in others)
            item["demo_text"] = f"For example:\n\n{demo}\n\nNow, read the following story:\n\n"
        for item in items:
            item["demo"] = item.pop("demo_text")
    kept = [{**x, "context": books.truncate(x["context"], limit)} for x in items if books.count(x["context"]) >= 65536]
    return shuffled(kept, seed)[:samples]


ICL_SOURCES = {  # dataset -> (test split, text column, label column)
    "icl_trec_coarse": ("test", "text", "coarse_label"), "icl_trec_fine": ("test", "text", "fine_label"),
    "icl_banking77": ("test", "text", "label"), "icl_clinic150": ("validation", "text", "intent"),
    "icl_nlu": ("train", "text", "label"),
}


def load_icl(d: Dataset, data_dir: Path, shots: int, samples: int, seed: int,
             natural_label: bool) -> list[dict[str, Any]]:
    """load_icl (the configs' `_balance` variant): 500 test rows balanced over labels after
    shuffle(seed); per row `shots` balanced demonstrations seeded by sha256(text) + seed and
    the labels mapped to a random permutation of integers (natural_label: their names)."""
    split, text, label = ICL_SOURCES[d.name]
    hub = d.hub[0]
    if d.name == "icl_nlu":
        rows = hub_rows(hub, data_dir, "train", (text, label))
        train_idx, test_idx = train_test_split(len(rows), 0.1, seed)
        train, test = [rows[i] for i in train_idx], [rows[i] for i in test_idx]
    else:
        train = hub_rows(hub, data_dir, "train", (text, label))
        test = hub_rows(hub, data_dir, split, (text, label))
    names = label_names(hub, data_dir, "train", label) if natural_label else None
    if len(test) > samples:
        test = balance_labels(shuffled(test, seed), label, samples, seed)
    items = []
    for r in test:
        local = (int(hashlib.sha256(r[text].encode("utf-8")).hexdigest(), 16) + seed) % 2**31
        demos = balance_labels(train, label, shots, local)
        if names is not None:
            mapping: list[Any] = [names[i] for i in range(d.num_labels)]
        else:
            mapping = list(range(d.num_labels))
            random.Random(local).shuffle(mapping)
        try:
            context = "\n\n".join(prompts.ICL_ITEM.format(text=x[text], label=str(mapping[int(x[label])]))
                                  for x in demos)
            answer = str(mapping[int(r[label])])
        except IndexError:
            raise EvaluatorError(f"helmet: {d.name}: a label beyond its {d.num_labels} labels; {hub.howto()}") from None
        items.append({"context": context, "question": r[text], "answer": answer, "label": r[label]})
    return items


def attach_keypoints(d: Dataset, data_dir: Path, items: list[dict[str, Any]]) -> None:
    """eval_gpt4_summ.py's key points of each judged summary, read from HELMET's file by id
    (InfiniteBench: `keypoints`; Multi-LexSum: `summary/short_keypoints`)."""
    path = Path(data_dir) / "helmet" / d.keypoints
    field = "keypoints" if d.kind == "infbench" else "summary/short_keypoints"
    found = {}
    for r in read_jsonl(path):
        need(r, ("id", field), str(path))
        found[r["id"]] = r[field]
    for item in items:
        if item["id"] not in found:
            raise EvaluatorError(f"helmet: {path} has no key points of {d.name} sample {item['id']!r}; {DATA_HOWTO}")
        item["keypoints"] = found[item["id"]]


def load(dataset: str, length: int, data_dir: Path | None, *, shots: int, samples: int, seed: int,
         popularity_threshold: float = 3.0, natural_label: bool = False,
         books: Callable[[], Books] | None = None, judged: bool = False) -> Loaded:
    """HELMET's test items of `dataset` at `length` (load_data's dispatch); `judged`: a summary's
    key points attached for its judge."""
    if data_dir is None:
        raise EvaluatorError(f"helmet: no data directory is configured (--data-dir or LCTX_DATA_DIR); {DATA_HOWTO}")
    d = DATASETS[dataset]
    knob = d.knob_at(length)
    test, demo = d.test_file(data_dir, length), d.demo_file(data_dir)
    extra: dict[str, Any] = {}
    if d.kind == "json_kv":
        items = load_json_kv(d, test, shots, samples, seed)
    elif d.kind == "ruler":
        items = load_ruler(test, samples, seed)
    elif d.kind == "qa":
        items = load_qa(d, test, demo, shots, samples, seed, popularity_threshold)
    elif d.kind == "rerank":
        items, extra["k_values"] = load_rerank(test, demo, shots, samples, seed)
    elif d.kind == "alce":
        items = load_alce(d, test, demo, knob, shots, samples, seed)
    elif d.kind == "icl":
        items = load_icl(d, data_dir, knob, samples, seed, natural_label)
    else:
        if books is None:
            raise EvaluatorError(f"helmet: {dataset} needs the book tokenizer")
        loader = {"narrativeqa": load_narrativeqa, "lexsum": load_multi_lexsum}.get(d.kind)
        if loader is not None:
            items = loader(data_dir, books(), knob, shots, samples, seed)
        else:
            items = load_infbench(dataset, data_dir, books(), knob, shots, samples, seed)
        if judged and d.keypoints:
            attach_keypoints(d, data_dir, items)
    return Loaded(dataset, length, items, prompts.templates_for(dataset, d.kind), extra)
