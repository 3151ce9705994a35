"""HELMET's datasets, their categories, their per-length knobs and the files each reads
(docs/protocols/helmet.md). Pure tables and path rules (no torch, no pyarrow): the option
model and the service's submission check read them.

Every number here is a HELMET config's (`configs/*.yaml`, `configs/*_short.yaml`, and for
4k `scripts/generate_configs.py`'s `master_mapping`): a length is reached by each
dataset's own knob (key-value pairs, passages, documents, shots, the book's truncation),
never by padding. Local files sit where HELMET's `data.tar.gz` unpacks them
(`<data dir>/helmet/data/...`) beside its repository's `prompts/` (ALCE's prompt files); the
hub datasets HELMET loads at run time are read from snapshots in `<data dir>/helmet/hub/<repo>`
(what `huggingface-cli download <repo> --repo-type dataset --local-dir ...` writes; script
datasets from their `refs/convert/parquet` revision)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = "helmet"  # under the data directory
LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)  # generate_configs.py's lengths_mapping
DEFAULT_LENGTHS = [8192, 16384, 32768, 65536, 131072]  # the configs (_short: 8k-64k, plain: 128k)

DATA_HOWTO = ("HELMET's files: download https://huggingface.co/datasets/princeton-nlp/HELMET/resolve/main/data.tar.gz "
              "(scripts/download_data.sh), unpack it into <data dir>/helmet (it makes helmet/data/...) and copy the "
              "prompts/ folder of https://github.com/princeton-nlp/HELMET into <data dir>/helmet/prompts")
HUB_HOWTO = ("the hub datasets HELMET loads at run time as snapshots: huggingface-cli download {repo} --repo-type "
             "dataset{revision} --local-dir <data dir>/helmet/hub/{repo}")
TOKENIZER_HOWTO = ("HELMET truncates books to a length in Llama-2 tokens (truncate_llama2): put the tokenizer.json of "
                   "meta-llama/Llama-2-7b-hf (any copy of that tokenizer, e.g. hf-internal-testing/llama-tokenizer) at "
                   "{path}, or set book_tokenizer=model to count with the evaluated model's tokenizer")
LLAMA2_TOKENIZER = "tokenizers/llama-2/tokenizer.json"

CATEGORIES = ("recall", "rag", "rerank", "cite", "longqa", "summ", "icl")  # collect_results.py's custom_avgs
EXTRA_CATEGORIES = ("ruler",)  # HELMET's ruler.yaml: run on request, not in the overall average
# The configs' use_chat_template for an instruct model (run_eval_slurm.sh turns it off for base models).
CHAT_CATEGORIES = ("cite", "longqa", "summ")
# The configs' shots and max_test_samples per category.
SHOTS = {"recall": 2, "rag": 2, "rerank": 2, "cite": 2, "longqa": 2, "summ": 2, "icl": 0, "ruler": 0}
SAMPLES = {"icl": 500}  # the rest: 100


@dataclass(frozen=True)
class Hub:
    """A hub dataset HELMET loads with `load_dataset` at run time: where its snapshot lies and
    which files hold each split (glob patterns relative to the snapshot)."""

    repo: str
    splits: dict[str, tuple[str, ...]]
    revision: str | None = None  # the revision to download (script datasets: their parquet conversion)

    def folder(self, data_dir: Path) -> Path:
        return Path(data_dir) / ROOT / "hub" / self.repo

    def files(self, data_dir: Path, split: str) -> list[Path]:
        """The split's files in the snapshot: the first pattern that matches any."""
        folder = self.folder(data_dir)
        for pattern in self.splits[split]:
            found = sorted(p for p in folder.glob(pattern) if p.is_file())
            if found:
                return found
        return []

    def expected(self, split: str) -> str:
        """The layout a missing split is named by: the parquet conversion's for a script dataset."""
        patterns = self.splits[split]
        return next((p for p in patterns if f"/{split}/" in p), patterns[0]) if self.revision else patterns[0]

    def howto(self) -> str:
        return HUB_HOWTO.format(repo=self.repo, revision=f" --revision {self.revision}" if self.revision else "")


def _parquet(split: str, config: str = "default") -> tuple[str, ...]:
    """The layouts of a split's parquet files: the hub's `data/<split>-*.parquet`, the parquet
    conversion's `<config>/<split>/*.parquet` (and its older `<config>/*-<split>.parquet`)."""
    return (f"data/{split}-*.parquet", f"{config}/{split}/*.parquet", f"{config}/*-{split}.parquet",
            f"{split}-*.parquet")


NARRATIVEQA = Hub("deepmind/narrativeqa", {"train": _parquet("train"), "test": _parquet("test")})
MULTI_LEXSUM = Hub("allenai/multi_lexsum", {"train": _parquet("train", "v20230518"),
                                            "validation": _parquet("validation", "v20230518")},
                   revision="refs/convert/parquet")
INFBENCH = Hub("xinrongzhang2022/InfiniteBench", {
    "longbook_qa_eng": ("longbook_qa_eng.jsonl",), "longbook_choice_eng": ("longbook_choice_eng.jsonl",),
    "longbook_sum_eng": ("longbook_sum_eng.jsonl",)})
TREC = Hub("CogComp/trec", {"train": _parquet("train"), "test": _parquet("test")}, revision="refs/convert/parquet")
BANKING77 = Hub("PolyAI/banking77", {"train": _parquet("train"), "test": _parquet("test")})
CLINC = Hub("clinc/clinc_oos", {"train": _parquet("train", "plus") + ("plus/train-*.parquet",),
                                "validation": _parquet("validation", "plus") + ("plus/validation-*.parquet",)})
NLU = Hub("xingkunliuxtracta/nlu_evaluation_data", {"train": _parquet("train")}, revision="refs/convert/parquet")


@dataclass(frozen=True)
class Dataset:
    """One HELMET dataset: its name (the configs' without a length suffix), category,
    generation_max_length, its per-length knob (`knob[length]`: key-value pairs, passages,
    documents, shots, or tokens the book is truncated to) and how it is loaded."""

    name: str
    category: str
    kind: str  # the load_* of data.py: json_kv, ruler, qa, rerank, alce, narrativeqa, infbench, lexsum, icl
    generation_max_length: int
    knob: dict[int, int] = field(default_factory=dict)
    test: str = ""  # the test file under helmet/, {k} the knob
    demo: str = ""  # the demo file under helmet/
    hub: tuple[Hub, ...] = ()
    num_labels: int = 0  # ICL
    beyond: bool = False  # lengths beyond 128k allowed (the knob scaled from 128k's)
    per_key: int = 1  # rows per drawn question key (RAG, re-rank: one per depth, the files' depN)
    keypoints: str = ""  # the judged summaries' key points under helmet/ (eval_gpt4_summ.py reads them by id)

    def knob_at(self, length: int) -> int:
        if length in self.knob:
            return self.knob[length]
        if self.beyond and length > max(self.knob):  # json_kv: pairs grow with the length, as 64k -> 128k does
            return round(self.knob[131072] * length / 131072)
        raise ValueError(f"{self.name}: no HELMET setting for length {length} (it has {sorted(self.knob)})")

    def test_file(self, data_dir: Path, length: int) -> Path | None:
        return Path(data_dir) / ROOT / self.test.format(k=self.knob_at(length)) if self.test else None

    def demo_file(self, data_dir: Path) -> Path | None:
        return Path(data_dir) / ROOT / self.demo if self.demo else None


def _by_length(values: tuple[int, ...]) -> dict[int, int]:
    return dict(zip(LENGTHS, values, strict=True))


# generate_configs.py: RULER's tasks and the folders of HELMET's RULER files.
RULER_DIRS = {"ruler_niah_s_1": "niah_single_1", "ruler_niah_s_2": "niah_single_2", "ruler_niah_s_3": "niah_single_3",
              "ruler_niah_mk_1": "niah_multikey_1", "ruler_niah_mk_2": "niah_multikey_2",
              "ruler_niah_mk_3": "niah_multikey_3", "ruler_niah_mq": "niah_multiquery",
              "ruler_niah_mv": "niah_multivalue", "ruler_cwe": "cwe", "ruler_fwe": "fwe", "ruler_vt": "vt",
              "ruler_qa_1": "qa_1", "ruler_qa_2": "qa_2"}
RULER_GEN = {"ruler_niah_mk_3": 100, "ruler_niah_mq": 100, "ruler_cwe": 100}  # the rest: 50
SAME = _by_length(LENGTHS)


def _ruler(name: str, category: str) -> Dataset:
    return Dataset(name, category, "ruler", RULER_GEN.get(name, 50), SAME,
                   f"data/ruler/{RULER_DIRS[name]}/validation_{{k}}.jsonl", beyond=True)


def _kilt(name: str, test: str, demo: str) -> Dataset:
    return Dataset(name, "rag", "qa", 20, _by_length((20, 50, 105, 220, 440, 1000)), test, demo,
                   per_key=3 if "dep3" in test else 6)


def _icl(name: str, shots: tuple[int, ...], hub: Hub, labels: int) -> Dataset:
    return Dataset(name, "icl", "icl", 20, _by_length(shots), hub=(hub,), num_labels=labels)


def _trunc(reserve: int) -> dict[int, int]:
    """The longqa/summ datasets' truncation: the length minus the prompt's reserve and the generation."""
    return {n: n - reserve for n in LENGTHS}


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("json_kv", "recall", "json_kv", 100, _by_length((50, 105, 220, 440, 900, 1800)),
            "data/json_kv/test_k{k}_dep6.jsonl", beyond=True),
    _ruler("ruler_niah_mk_2", "recall"), _ruler("ruler_niah_mk_3", "recall"), _ruler("ruler_niah_mv", "recall"),
    _kilt("kilt_nq", "data/kilt/nq-dev-multikilt_1000_k{k}_dep6.jsonl", "data/kilt/nq-train-multikilt_1000_k3_dep6.jsonl"),
    _kilt("kilt_triviaqa", "data/kilt/triviaqa-dev-multikilt_1000_k{k}_dep6.jsonl",
          "data/kilt/triviaqa-train-multikilt_1000_k3_dep6.jsonl"),
    _kilt("kilt_hotpotqa", "data/kilt/hotpotqa-dev-multikilt_1000_k{k}_dep3.jsonl",
          "data/kilt/hotpotqa-train-multikilt_1000_k3_dep3.jsonl"),
    _kilt("kilt_popqa", "data/kilt/popqa_test_1000_k{k}_dep6.jsonl", "data/kilt/popqa_test_1000_k3_dep6.jsonl"),
    Dataset("msmarco_rerank_psg", "rerank", "rerank", 200, _by_length((14, 50, 130, 285, 600, 1000)),
            "data/msmarco/test_reranking_data_k{k}_dep3.jsonl", "data/msmarco/test_reranking_data_k10_dep3.jsonl",
            per_key=3),
    Dataset("alce_asqa", "cite", "alce", 300, _by_length((8, 30, 75, 165, 345, 700)),
            "data/alce/asqa_eval_gtr_top2000.json", "prompts/asqa_revised.json"),
    Dataset("alce_qampari", "cite", "alce", 300, _by_length((8, 30, 75, 165, 345, 700)),
            "data/alce/qampari_eval_gtr_top2000.json", "prompts/qampari_revised.json"),
    Dataset("narrativeqa", "longqa", "narrativeqa", 100, _trunc(300), hub=(NARRATIVEQA,)),
    Dataset("infbench_qa_eng", "longqa", "infbench", 10, _trunc(210), hub=(INFBENCH,)),
    Dataset("infbench_choice_eng", "longqa", "infbench", 10, _trunc(210), hub=(INFBENCH,)),
    Dataset("infbench_sum_eng", "summ", "infbench", 1200, _trunc(1400), hub=(INFBENCH,),
            keypoints="data/infbench/longbook_sum_eng_keypoints.jsonl"),
    Dataset("multi_lexsum", "summ", "lexsum", 400, _trunc(700), hub=(MULTI_LEXSUM,),
            keypoints="data/multi_lexsum/multi_lexsum_val.jsonl"),
    _icl("icl_trec_coarse", (200, 400, 800, 1600, 3300, 6600), TREC, 6),
    _icl("icl_trec_fine", (200, 400, 800, 1600, 3200, 6400), TREC, 50),
    _icl("icl_banking77", (180, 360, 720, 1450, 2900, 5900), BANKING77, 77),
    _icl("icl_clinic150", (220, 440, 880, 1750, 3525, 7050), CLINC, 151),
    _icl("icl_nlu", (250, 510, 1020, 2040, 4080, 8296), NLU, 68),
    *(_ruler(n, "ruler") for n in RULER_DIRS if n not in ("ruler_niah_mk_2", "ruler_niah_mk_3", "ruler_niah_mv")),
)}
DATASET_NAMES = tuple(DATASETS)
BOOKS = ("narrativeqa", "infbench", "lexsum")  # truncated in Llama-2 tokens (truncate_llama2)
JUDGED = ("narrativeqa", "infbench_sum_eng", "multi_lexsum")  # graded by GPT-4o in HELMET's scripts
CITED = ("alce_asqa", "alce_qampari")  # citation recall / precision need the NLI model


def datasets_of(categories: list[str]) -> list[str]:
    return [n for n, d in DATASETS.items() if d.category in categories]


def hub_split(dataset: Dataset, split: str) -> Hub:
    return next(h for h in dataset.hub if split in h.splits)


def needed_files(name: str, length: int, data_dir: Path, judged: bool = False) -> list[tuple[Path, str]]:
    """(path, where to get it) of each local file a dataset at a length reads (a hub split:
    its snapshot folder when it holds no file of the split); `judged`: with the key points
    its judge prompts read."""
    d = DATASETS[name]
    out = []
    keypoints = Path(data_dir) / ROOT / d.keypoints if judged and d.keypoints else None
    for path in (d.test_file(data_dir, length), d.demo_file(data_dir), keypoints):
        if path is not None:
            out.append((path, DATA_HOWTO))
    for hub in d.hub:
        for split in hub.splits:
            if d.kind == "infbench" and split != f"longbook_{name.removeprefix('infbench_')}":
                continue
            files = hub.files(data_dir, split)
            out += [(f, hub.howto()) for f in files] or [(hub.folder(data_dir) / hub.expected(split), hub.howto())]
    return out
