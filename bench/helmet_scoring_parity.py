"""lctx's HELMET scoring against HELMET's own functions, run side by side:
`python bench/helmet_scoring_parity.py --official DIR` where DIR is a checkout of
princeton-nlp/HELMET (its `utils.py`, `data.py`, `eval_alce.py` and the two
`scripts/eval_gpt4_*.py` are imported from there, not copied; HELMET's own `model_utils` and
whatever of transformers/datasets is not installed are stubbed: the functions compared never
call them). HELMET's utils.py imports pytrec_eval (`pip install pytrec-eval-terrier`).

On random outputs, answers and rankings (a fixed seed): parse_output, default_post_process,
the post_process of json_kv, ICL, Multi-LexSum, InfiniteBench MC, RULER and MS MARCO (the
latter nested in their load_* functions: taken out of data.py's syntax tree and run),
parse_rankings; pytrec_eval's ndcg_cut / map_cut / recall / P / recip_rank against
`metrics.retrieval_metrics` on runs with ties, unjudged ids and all-zero judgments;
eval_alce.py's compute_autoais (citations, with a deterministic stand-in NLI and sentence
splitter patched into both), compute_str_em, compute_qampari_f1; the judge scripts'
parse_json, parse_output and filled prompts. Prints one line per check and a verdict;
bench/results/helmet_scoring_parity.txt is its saved output."""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import importlib
import io
import logging
import random
import re
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.helmet import alce as A  # noqa: E402
from evaluators.helmet import judged as J  # noqa: E402
from evaluators.helmet import metrics as M  # noqa: E402

WORDS = ["the", "a", "An", "Paris", "paris.", "Answer:", "answer:", "label:", "Label: 3", "3", "12", "yes", "no",
         "\n", "\n\n", "corresponding value:", "Summary:", "é", "Über", "dog's", "  ", ",", "[1]", "[2][3]", "(x)",
         "B.", "A", "C. Blue", "north", "pole"]
REPLIES = ['{"fluency": 1, "correctness": 2}', 'x {"a": 1} then {"fluency": 0, "correctness": 3}', "no json",
           '{"fluency": 1, "correctness": 2', '```json\n{"recall": 3}\n```',
           '{bad} ```json {"precision": 2, "sentence_count": 4}```', '{"recall": 2}']


def load_official(folder: Path) -> dict[str, Any]:
    for name in ("transformers", "datasets", "torch", "model_utils"):
        try:
            if name == "model_utils":
                raise ImportError
            importlib.import_module(name)
        except ImportError:
            stub = types.ModuleType(name)
            for attr in ("AutoTokenizer", "AutoModelForSeq2SeqLM", "pipeline", "load_dataset", "load_from_disk",
                         "OpenAIModel"):
                setattr(stub, attr, None)
            sys.modules[name] = stub
    sys.path[:0] = [str(folder), str(folder / "scripts")]
    mods = {n: importlib.import_module(n) for n in ("utils", "data", "eval_alce", "eval_gpt4_longqa",
                                                    "eval_gpt4_summ")}
    logging.disable(logging.CRITICAL)
    return mods


def nested(data_py: Path, namespace: dict[str, Any], outer: str, inner: str, **extra: Any) -> Any:
    """A post_process defined inside a load_* function, compiled alone with data.py's names."""
    for node in ast.walk(ast.parse(data_py.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == outer:
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef) and sub.name == inner:
                    ns = {**namespace, **extra}
                    exec(compile(ast.Module([sub], []), f"{outer}.{inner}", "exec"), ns)  # noqa: S102
                    return ns[inner]
    raise LookupError(f"{outer}.{inner} not in {data_py}")


def floats(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()}


def stand_in_nli(premise: str, claim: str) -> bool:
    return (len(premise) * 7 + len(claim) * 3) % 5 < 2


def split(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.!?])\s+", text) if x]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--official", type=Path, required=True, help="a checkout of princeton-nlp/HELMET")
    p.add_argument("--trials", type=int, default=1500)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    off = load_official(args.official)
    H, HD, HA, HL, HS = (off[n] for n in ("utils", "data", "eval_alce", "eval_gpt4_longqa", "eval_gpt4_summ"))
    import pytrec_eval

    data_py = args.official / "data.py"
    ns = vars(HD)
    post = {"json_kv": nested(data_py, ns, "load_json_kv", "post_process"),
            "icl": nested(data_py, ns, "load_icl", "post_process", system_template="label:"),
            "lexsum": nested(data_py, ns, "load_multi_lexsum", "post_process", system_template="Summary:"),
            "choice": nested(data_py, ns, "load_infbench", "choice_post_process"),
            "ruler": nested(data_py, ns, "load_ruler", "post_process"),
            "rerank": nested(data_py, ns, "load_msmarco_rerank", "post_process", k_values=[1, 5, 10])}
    HA._run_nli_autoais = lambda passage, claim: int(stand_in_nli(passage, claim))
    HA.autoais_model = object()
    HA.sent_tokenize = split
    rng = random.Random(args.seed)
    checked: Counter[str] = Counter()
    differ: Counter[str] = Counter()
    first: dict[str, str] = {}

    def check(name: str, official: Any, ours: Any) -> None:
        checked[name] += 1
        if official != ours:
            differ[name] += 1
            first.setdefault(name, f"official {official!r} lctx {ours!r}")

    def text(n: int | None = None) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n if n is not None else rng.randint(0, 12)))

    for _ in range(args.trials):
        out = text()
        answers: Any = [text(rng.randint(1, 3)) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.2:
            answers = [answers]
        flat = answers if isinstance(answers[0], str) else answers[0]
        check("parse_output", H.parse_output(out), M.parse_output(out))
        check("parse_output label:", H.parse_output(out, "label:"), M.parse_output(out, "label:"))
        check("default_post_process", floats(HD.default_post_process({"output": out}, {"answer": answers})[0]),
              M.score_output("kilt_nq", out, {"answer": answers}))
        check("json_kv post_process", floats(post["json_kv"]({"output": out}, {"answer": flat[0]})[0]),
              M.score_output("json_kv", out, {"answer": flat[0]}))
        check("icl post_process", floats(post["icl"]({"output": out}, {"answer": "3"})[0]),
              M.score_output("icl_banking77_5900shot_balance", out, {"answer": "3"}))
        check("multi_lexsum post_process", floats(post["lexsum"]({"output": out}, {"answer": answers})[0]),
              M.score_output("multi_lexsum_130372", out, {"answer": answers}))
        choice = [rng.choice("ABCD"), rng.choice(["A. Blue", "C. Blue", "B. dog's"])]
        check("infbench choice_post_process", floats(post["choice"]({"output": out}, {"answer": choice})[0]),
              M.score_output("infbench_choice_eng_130862", out, {"answer": choice}))
        needles = [rng.choice(["Paris", "12", "3", "pole"]) for _ in range(rng.randint(1, 3))]
        check("ruler post_process", floats(post["ruler"]({"output": out}, {"answer": needles})[0]),
              M.score_output("ruler_niah_mv", out, {"answer": needles}))
        ranking = " > ".join(rng.choice(["[1]", "ID: 2", "3", "[ID4]", "x", "10", "2"])
                             for _ in range(rng.randint(0, 12))) + rng.choice(["", " junk 5 > 6", "\n7>8>9>1>2"])
        check("parse_rankings", H.parse_rankings(ranking), M.parse_rankings(ranking))
        qrel = [[str(i), str(rng.choice([0, 0, 1, 2, 3]))] for i in range(1, 11)]
        check("msmarco post_process", floats(post["rerank"]({"output": ranking}, {"qid": "q", "qrel": qrel})[0]),
              M.score_output("msmarco_rerank_psg", ranking, {"qid": "q", "qrel": qrel}))
        # pytrec_eval on hand-made runs: ties, unjudged ids, all-zero judgments
        ks = [1, 5, 10, 20, 50]
        qrels = {str(rng.randint(0, 60)): rng.choice([0, 0, 0, 1, 2, 3]) for _ in range(rng.randint(1, 30))}
        if rng.random() < 0.15:
            qrels = dict.fromkeys(qrels, 0)
        pool = [*qrels, *(str(rng.randint(0, 200)) for _ in range(10)), "junk"]
        run = {rng.choice(pool): float(rng.choice([1, 2, 3, rng.randint(1, 50)])) for _ in range(rng.randint(1, 40))}
        measures = {f"{m}.{','.join(map(str, ks))}" for m in ("map_cut", "ndcg_cut", "recall", "P")} | {"recip_rank"}
        s = pytrec_eval.RelevanceEvaluator({"q": qrels}, measures).evaluate({"q": run})["q"]
        official = {"MRR": round(s["recip_rank"], 5)}
        for k in ks:
            official |= {f"NDCG@{k}": round(s[f"ndcg_cut_{k}"], 5), f"MAP@{k}": round(s[f"map_cut_{k}"], 5),
                         f"Recall@{k}": round(s[f"recall_{k}"], 5), f"P@{k}": round(s[f"P_{k}"], 5)}
        check("pytrec_eval measures", official, M.retrieval_metrics(run, qrels, ks))
        # ALCE
        docs = [{"title": f"T{i}", "text": f"doc {i} text"} for i in range(4)]
        cites = ["", "[1]", "[2][3]", "[1][2][4]", "[5]", "[0]", "[1] [2]", "[3][3]"]
        sents = [text(rng.randint(1, 6)) + rng.choice(cites) + rng.choice([".", ",", ""])
                 for _ in range(rng.randint(0, 4))]
        aout = " ".join(sents) + rng.choice(["", "\n\nmore [2].", "<|im_end|>"])
        item = {"question": "Q?", "docs": docs, "output": aout,
                "qa_pairs": [{"short_answers": [text(2) for _ in range(2)]} for _ in range(rng.randint(1, 3))],
                "answers": [[text(1)] for _ in range(rng.randint(1, 7))]}
        for ds in ("alce_asqa_700", "alce_qampari_700"):
            data = [copy.deepcopy(item)]
            data[0]["output"] = re.sub(r"\n+", " ", data[0]["output"]).replace("<|im_end|>", "")
            norm = copy.deepcopy(data)
            norm[0]["output"] = H.remove_citations(norm[0]["output"])
            with contextlib.redirect_stdout(io.StringIO()):
                cited = HA.compute_autoais(data, qampari="qampari" in ds, at_most_citations=3)
            ours = A.citation_scores(ds, aout, item, stand_in_nli, split)
            check("compute_autoais", (cited["citation_rec"], cited["citation_prec"]),
                  (100 * ours["citation_rec"], 100 * ours["citation_prec"]) if ours else (0, 0))
            sc = M.score_output(ds, aout, item)
            if "qampari" in ds:
                q = HA.compute_qampari_f1(norm)
                check("compute_qampari_f1", (q["qampari_rec_top5"], q["qampari_prec"], q["qampari_rec"]),
                      (100 * sc["qampari_rec_top5"], 100 * sc["qampari_prec"], 100 * sc["qampari_rec"]))
            else:
                check("compute_str_em", HA.compute_str_em(norm), (100 * sc["str_em"], 100 * sc["str_hit"]))
        # judges
        reply = rng.choice(REPLIES)
        check("longqa parse_json", HL.parse_json(reply), J.longqa_json(reply))
        try:
            official_summ = HS.parse_json(reply)
        except Exception:  # noqa: BLE001 - record the official crash as a value
            official_summ = "raised"
        check("summ parse_json", official_summ, J.summ_json(reply))
        check("longqa parse_output", HL.parse_output(out), J.longqa_parse_output(out))
        sample = {"question": text(3), "answer": flat}
        check("longqa prompt", HL.judge_prompt.format(question=sample["question"], correct_answers=sample["answer"],
                                                      parsed_output=HL.parse_output(out)),
              J.prompt_texts("narrativeqa_130772", out, sample)[0])
        kp = [text(3) for _ in range(rng.randint(0, 3))]
        summ = {"keypoints": kp, "summary/long": text(5), "answer": [text(4)]}
        numbered = "\n".join(f"{i + 1}. {k}" for i, k in enumerate(kp))
        check("summ prompts", [HS.fluency_prompt.format(text=out.strip()),
                               HS.recall_prompt.format(keypoints=numbered, summary=out.strip()),
                               HS.precision_prompt.format(expert_summary=summ["summary/long"], summary=out.strip())],
              J.prompt_texts("multi_lexsum_130372", out, summ))
        check("summ book prompts", [HS.fluency_prompt_book.format(text=out.strip()),
                                    HS.recall_prompt_book.format(keypoints=numbered, summary=out.strip()),
                                    HS.precision_prompt_book.format(expert_summary=summ["answer"][0],
                                                                    summary=out.strip())],
              J.prompt_texts("infbench_sum_eng_129672", out, summ))
    for name in checked:
        line = f"{name}: {checked[name]} cases, {differ[name]} differ"
        print(line + (f" (first: {first[name]})" if name in first else ""))
    print("verdict:", "same" if not differ else f"{sum(differ.values())} differences")


if __name__ == "__main__":
    main()
