"""`lctx score helmet --pred-dir DIR`: HELMET's numbers made again from answers made
elsewhere, with the code the `helmet` task scores with (`metrics`, `alce`, `judged`,
`collect`), beside the numbers the files recorded, so the two compare line by line.

What DIR may hold (one model's files; or one folder per model, each holding them):
- HELMET's output files as eval.py writes them (`<dataset>_<tag>_..._in<length>_....json`:
  `args`, `data` (the samples, each with its `output`), `averaged_metrics`), with the files
  made from them: `<same>.json.score` (eval_alce.py's metrics for ALCE) and
  `<same>-gpt4eval_o.json` (the GPT-4o judge scripts' copy, each sample with its
  `gpt-4-scores`). Dataset and length are read from `args` (`datasets`,
  `input_max_length`), never guessed from the name.
- lctx's records: the `samples.jsonl` of a `helmet` task run (`task` "helmet", `dataset`,
  `length`, `output`, `references`, `item`, `metrics`, `judgments`).

Recomputed from the answers: every metric of `metrics.score_output`; the judged metrics from
the judge's recorded replies (the summary script keeps them; the QA script keeps only the
parsed fluency and correctness, which are used); ALCE's citation metrics cannot be (they
need the NLI model) and are taken as recorded, and said so. "recorded": what collect_results.py
reads (get_path: the -gpt4eval_o.json file, else the .json.score file, else the output
file's averaged_metrics), or the records' own metrics."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.helmet import collect, judged, metrics

MAX_FILE_BYTES = 2 << 30  # an output file with ALCE's 700 documents per sample stays far below
CITATIONS = ("citation_rec", "citation_prec")
GPT4_SUFFIX = "-gpt4eval_o.json"
SAMPLES = "samples.jsonl"
LAYOUT = ("HELMET's output files (<dataset>_..._in<length>_....json with args, data and averaged_metrics; "
          "their .json.score and -gpt4eval_o.json companions) or the samples.jsonl of an lctx helmet run")


def read_json(path: Path) -> Any:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise EvaluatorError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} a HELMET output file can be")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise EvaluatorError(f"{path} is not a JSON file ({e}); {LAYOUT}") from None


def is_output_file(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("data"), list) and isinstance(doc.get("args"), dict)


def where_of(doc: dict[str, Any], path: Path) -> tuple[str, int]:
    """(dataset, length) of an output file, from its args as eval.py saved them."""
    args = doc["args"]
    dataset, length = args.get("datasets"), args.get("input_max_length")
    if not isinstance(dataset, str) or "," in dataset or isinstance(length, bool) or not isinstance(length, int):
        raise EvaluatorError(f"{path}: args must name one dataset (datasets) and its input_max_length as eval.py "
                             f"saves them; got datasets={dataset!r}, input_max_length={length!r}")
    return dataset, length


def _mean(values: Iterable[float]) -> float | None:
    vs = list(values)
    return sum(vs) / len(vs) if vs else None


def _numbers(d: Any) -> dict[str, float]:
    """The finite numbers of a metrics dict (booleans as 0/1), nothing else."""
    if not isinstance(d, dict):
        return {}
    return {k: float(v) for k, v in d.items()
            if isinstance(k, str) and isinstance(v, bool | int | float) and math.isfinite(float(v))}


def _averages(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the rows that have it (eval.py's and eval_alce.py's means)."""
    cells: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for k, v in r.items():
            cells[k].append(v)
    return {k: sum(v) / len(v) for k, v in cells.items()}


def _sample_of(d: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    output = d.get("output")
    if not isinstance(output, str):
        raise EvaluatorError(f"{where}: a sample without its output (text); {LAYOUT}")
    return output, d


# --- HELMET's output files ------------------------------------------------------------------


def judged_rows(dataset: str, data: list[Any]) -> tuple[list[dict[str, float]], int]:
    """The judged metrics of each sample of a -gpt4eval_o.json file and how many samples the
    scripts dropped (no parsed judgment). NarrativeQA: fluency x correctness of the stored
    `gpt-4-scores`; summaries: the stored raw replies parsed again with `judged.scores_from`."""
    rows, unparsed = [], 0
    for d in data:
        s = d.get("gpt-4-scores") if isinstance(d, dict) else None
        if not isinstance(s, dict):
            unparsed += 1
            continue
        if judged.kind_of(dataset) == "narrativeqa":
            got = judged.scores_from(dataset, [json.dumps({"fluency": s.get("fluency"),
                                                           "correctness": s.get("correctness")})], d)
        else:
            replies = [s.get(k) for k in ("flunecy_output", "recall_output", "precision_output")]  # sic
            got = (judged.scores_from(dataset, replies, d)
                   if all(isinstance(r, str) for r in replies) and isinstance(d.get("keypoints"), list) else None)
        if got is None:
            unparsed += 1
        else:
            rows.append(got)
    return rows, unparsed


def score_helmet_file(base: Path | None, score: Path | None, gpt4: Path | None) -> dict[str, Any] | None:
    """One dataset at one length of HELMET's files: recomputed and recorded metrics (HELMET's
    averaged_metrics scale); None when the .json is not a HELMET output file (a result.json
    or other JSON beside them)."""
    main = base or gpt4
    assert main is not None
    doc = read_json(main)
    if not is_output_file(doc):
        return None
    dataset, length = where_of(doc, main)
    rows = [metrics.score_output(dataset, *_sample_of(d, f"{main} sample {i}")) for i, d in enumerate(doc["data"])]
    recomputed = _averages(rows)
    as_recorded: list[str] = []
    unparsed = None
    gdoc = read_json(gpt4) if gpt4 is not None else None
    if gdoc is not None and not is_output_file(gdoc):
        raise EvaluatorError(f"{gpt4}: not a judged HELMET output file (no args or data)")
    if gdoc is not None:
        jrows, unparsed = judged_rows(dataset, gdoc["data"])
        recomputed.update(_averages(jrows))
    sdoc = read_json(score) if score is not None else None
    if sdoc is not None and not isinstance(sdoc, dict):
        raise EvaluatorError(f"{score}: a .score file holds a JSON object of metrics")
    # what collect_results.py reads (get_path's order)
    if gdoc is not None:
        recorded, source = _numbers(gdoc.get("averaged_metrics")), gpt4
    elif sdoc is not None:
        recorded, source = _numbers(sdoc), score
    else:
        recorded, source = _numbers(doc.get("averaged_metrics")), main
    recomputed = {m: v * collect.eval_scale(m) for m, v in recomputed.items()}  # eval.py's x100: its scale
    if metrics.kind_of(dataset) == "alce":
        for m in CITATIONS:
            if m in recorded and m not in recomputed:
                recomputed[m] = recorded[m]  # as recorded: the NLI model is not here
                as_recorded.append(m)
    return {"dataset": dataset, "length": length, "file": str(main), "recorded_from": str(source),
            "samples": len(rows), "judge_unparsed": unparsed, "taken_as_recorded": as_recorded,
            "recomputed": recomputed, "recorded": recorded, "scale": "helmet"}


def helmet_groups(folder: Path) -> list[tuple[Path | None, Path | None, Path | None]]:
    """(output file, .json.score, -gpt4eval_o.json) of each run in a folder."""
    groups: dict[str, list[Path | None]] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            continue
        if p.name.endswith(GPT4_SUFFIX):
            groups.setdefault(p.name[: -len(GPT4_SUFFIX)], [None, None, None])[2] = p
        elif p.name.endswith(".json.score"):
            groups.setdefault(p.name[: -len(".json.score")], [None, None, None])[1] = p
        elif p.name.endswith(".json"):
            groups.setdefault(p.name[: -len(".json")], [None, None, None])[0] = p
    return [(b, s, g) for b, s, g in groups.values() if b is not None or g is not None]


# --- lctx's records ----------------------------------------------------------------------------


def record_rows(records: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (dataset, length) of a helmet run's records: recomputed and recorded metrics
    (per-sample means, the "sample" scale)."""
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for where, r in records:
        dataset, length, output = r.get("dataset"), r.get("length"), r.get("output")
        if r.get("error"):
            continue
        if not isinstance(dataset, str) or isinstance(length, bool) or not isinstance(length, int):
            raise EvaluatorError(f"{where}: a helmet record names its dataset and length; {LAYOUT}")
        if not isinstance(output, str):
            raise EvaluatorError(f"{where}: a helmet record without its output (text); {LAYOUT}")
        item = r.get("item") if isinstance(r.get("item"), dict) else {}
        sample = {**item, "answer": r.get("references")}
        mets = metrics.score_output(dataset, output, sample)
        recorded = _numbers(r.get("metrics"))
        cell = cells.setdefault((dataset, length), {"rows": [], "recorded": [], "unparsed": 0, "as_recorded": set()})
        for m in CITATIONS:
            if m in recorded:
                mets[m] = recorded[m]
                cell["as_recorded"].add(m)
        judgments = r.get("judgments")
        if isinstance(judgments, list) and judgments:
            replies = [j.get("answer", "") if isinstance(j, dict) else "" for j in judgments]
            try:
                got = judged.scores_from(dataset, replies, sample)
            except (KeyError, ValueError):  # no key points kept in the record: the recorded judged metrics
                got = {k: v for k, v in recorded.items() if k.startswith("gpt-4-")} or None
                cell["as_recorded"].update(k for k in recorded if k.startswith("gpt-4-"))
            if got is None:
                cell["unparsed"] += 1
            else:
                mets.update(got)
        cell["rows"].append(mets)
        cell["recorded"].append(recorded)
    return [{"dataset": d, "length": n, "file": SAMPLES, "recorded_from": SAMPLES, "samples": len(c["rows"]),
             "judge_unparsed": c["unparsed"], "taken_as_recorded": sorted(c["as_recorded"]),
             "recomputed": _averages(c["rows"]), "recorded": _averages(c["recorded"]), "scale": "sample"}
            for (d, n), c in sorted(cells.items())]


def lctx_records(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    from evaluators.data import json_objects

    path = folder / SAMPLES
    if not path.is_file():
        return []
    return [(f"{path}:{n}", r) for n, r in json_objects(path, "a helmet record") if r.get("task", "helmet") == "helmet"]


# --- the folder -----------------------------------------------------------------------------------


def model_folders(pred_dir: Path) -> dict[str, Path]:
    """The folder itself when it holds files, else each sub-folder that does (one per model,
    as HELMET's output/<model>/)."""
    def has_files(f: Path) -> bool:
        return (f / SAMPLES).is_file() or any(p.suffix == ".json" for p in f.iterdir() if p.is_file())

    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder; --pred-dir takes a folder of {LAYOUT}")
    if has_files(pred_dir):
        return {pred_dir.name: pred_dir}
    found = {p.name: p for p in sorted(pred_dir.iterdir()) if p.is_dir() and has_files(p)}
    if not found:
        raise EvaluatorError(f"no HELMET files in {pred_dir}: expected {LAYOUT}")
    return found


def _keyed(table: dict[str, Any]) -> dict[str, Any]:
    """collect's table with its tuple keys written as "name@length" (JSON)."""
    def key(k: Any) -> str:
        return f"{k[0]}@{k[1]}" if isinstance(k, tuple) else str(k)

    return {"categories": {key(k): v for k, v in table["categories"].items()},
            "overall": {str(n): v for n, v in table["overall"].items()},
            "incomplete": {key(k): v for k, v in table["incomplete"].items()},
            "dropped": [key(k) for k in table["dropped"]],
            "rows": collect.table_rows(table)}


def score_model(folder: Path) -> dict[str, Any]:
    files = [f for group in helmet_groups(folder) if (f := score_helmet_file(*group)) is not None]
    files += record_rows(lctx_records(folder))
    if not files:
        raise EvaluatorError(f"no HELMET output files or helmet records in {folder}: expected {LAYOUT}")
    out: dict[str, Any] = {"datasets": []}
    for which in ("recomputed", "recorded"):
        averaged: dict[tuple[str, int], dict[str, float]] = {}
        scales = {f["scale"] for f in files}
        if len(scales) > 1:
            raise EvaluatorError(f"{folder} mixes HELMET's output files and lctx records: give each its own folder")
        for f in files:
            key = (f["dataset"], f["length"])
            if key in averaged:
                raise EvaluatorError(f"{folder}: two runs of {f['dataset']} at {f['length']} ({f['file']}); keep one")
            averaged[key] = f[which]
        table = collect.collect(averaged, scales.pop())
        out[which] = _keyed(table)
        for f in files:
            f[f"reported_{which}"] = table["datasets"].get((f["dataset"], f["length"]))
    for f in files:
        a, b = f["reported_recomputed"] or {}, f["reported_recorded"] or {}
        diffs = [abs(a[m] - b[m]) for m in a if m in b]
        out["datasets"].append({k: f[k] for k in ("dataset", "length", "samples", "judge_unparsed",
                                                  "taken_as_recorded", "file", "recorded_from")}
                               | {"recomputed": f["reported_recomputed"], "recorded": f["reported_recorded"],
                                  "max_abs_difference": max(diffs) if diffs else None})
    return out


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    """{model folder: {"datasets": per dataset and length, "recomputed": the table from the
    answers, "recorded": the table from the recorded numbers}}; tables as collect_results.py
    prints them (per length every column, each category, the overall "Ours")."""
    return {name: score_model(folder) for name, folder in model_folders(Path(pred_dir)).items()}


def differences(result: dict[str, Any], tolerance: float = 1e-9) -> list[str]:
    """Lines naming each dataset whose recomputed numbers differ from the recorded ones."""
    out = []
    for model, r in result.items():
        for d in r["datasets"]:
            diff = d["max_abs_difference"]
            if diff is not None and diff > tolerance:
                out.append(f"{model}: {d['dataset']} at {d['length']}: recomputed differs from recorded by {diff:.3g}")
    return out

