"""Passkey retrieval and the needle grid.

Passkey follows the protocol of the TDA paper, appendix C (the landmark-attention
protocol; see `docs/protocols/protocols.md`, "Passkey retrieval"): five
blocks joined with "\\n", garbage length G fitted in the model's own tokens so
the prompt is as long as possible without exceeding the target, depth
p = randint(0, G), key = randint(1, 50000), every trial seeded from
(seed, length, trial), greedy decoding of 10 tokens, correct when the stripped
output equals the key or its first integer does.

The needle grid ("Needle grid" in the same file) puts the same needle and
question at chosen depths (percent, snapped to a sentence boundary) and
lengths, one accuracy per cell, with a heatmap (length on x, depth on y)."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.passkey_text import (  # noqa: F401 - the protocol's text, re-exported
    GARBAGE_SENTENCE,
    INTRO,
    KEY_RANGE,
    QUESTION,
    garbage,
    needle_text,
    passkey_prompt,
    repeated,
)
from checkpoints.tokenizer import Tokenizer
from evaluators.data import read_text
from evaluators.errors import EvaluatorError
from evaluators.passkey.options import NeedleOptions, PasskeyOptions
from evaluators.plots import heatmap
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample, decided_early
from evaluators.uncertainty import ErrorRule


def is_correct(output: str, key: int) -> bool:
    """The protocol's rule: stripped output equals the key, or its first integer does."""
    if output.strip() == str(key):
        return True
    first = re.search(r"\d+", output)
    return first is not None and int(first.group()) == key


def first_integer_decided(output: str) -> bool:
    """Whether `is_correct` can no longer change, whatever follows: the output's first integer
    is followed by another character, and an output that is only the key has its first integer
    equal to it. A replacement character right after a digit does not count: it may be the
    first bytes of a character a later token completes (another digit, for Unicode digits)."""
    return re.search(r"\d[^\d\ufffd]", output) is not None


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text))


def fit_length(tokenizer: Tokenizer, target: int, build: Callable[[int], str]) -> int:
    """The largest G >= 0 with len(encode(build(G))) <= target (0 when even G = 0
    is too long). Exponential then binary search: token counts grow with G."""
    if count_tokens(tokenizer, build(0)) > target:
        return 0
    lo, hi = 0, max(16, target)
    while count_tokens(tokenizer, build(hi)) <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(tokenizer, build(mid)) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def shrink_to_fit(tokenizer: Tokenizer, target: int, g: int, build: Callable[[int], str]) -> tuple[int, list[int]]:
    """Shorten G until the actual prompt fits (tokens at the needle's seams can
    differ from the probe); returns (G, prompt ids)."""
    ids = tokenizer.encode(build(g))
    while len(ids) > target and g > 0:
        g = max(0, g - max(1, len(ids) - target))
        ids = tokenizer.encode(build(g))
    return g, ids


def _accuracy(records: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    return {
        "accuracy": sum(r["score"] for r in records) / n if n else None,
        "n": n,
        "mean_prompt_tokens": sum(r["prompt_tokens"] for r in records) / n if n else None,
        "min_prompt_tokens": min((r["prompt_tokens"] for r in records), default=None),
        "max_prompt_tokens": max((r["prompt_tokens"] for r in records), default=None),
    }


def _points(cells: dict[str, dict[str, Any]]) -> list[tuple[str | int, float | None, int]]:
    return [(int(k) if k.lstrip("-").isdigit() else k, c["accuracy"], c["n"]) for k, c in cells.items()]


def retrieval_result(task: str, accuracy: float | None, by_length: dict[str, dict[str, Any]],
                     extra_series: list[Any], extra: dict[str, Any]) -> TaskResult:
    """Accuracy overall and per length (cells as `_accuracy` writes them); the per-length
    prompt sizes (and targets the protocol's fixed blocks exceed) go to `extra`."""
    n = sum(c["n"] for c in by_length.values())
    tokens = {k: {t: c.get(f"{t}_prompt_tokens") for t in ("mean", "min", "max")} for k, c in by_length.items()}
    over = {k: c["over_target"] for k, c in by_length.items() if c.get("over_target")}
    per_length = ", ".join(f"{k}: {fmt(c['accuracy'], 2)}" for k, c in by_length.items())
    return TaskResult(
        headline="accuracy",
        metrics=[metric("accuracy", accuracy, True, "fraction", n, "share of trials answered with the key")],
        series=[series("accuracy", "length", "fraction", True, _points(by_length)), *extra_series],
        summary=f"{task} accuracy {fmt(accuracy, 2)} over {n} trials ({per_length})",
        extra={"prompt_tokens": tokens, **({"over_target": over} if over else {}), **extra},
    )


class _Retrieval(Evaluator):
    """Shared generation of the passkey-style evaluators."""

    options: PasskeyOptions | NeedleOptions

    def request(self, sample: Sample, ids: list[int], key: int, record: dict[str, Any]) -> Built:
        """Greedy decoding of `max_new_tokens` after the prompt; `key` is kept for scoring."""
        decided = first_integer_decided if self.options.stop_when_decided else None
        return Built(sample, GenerateRequest(ids, max_new_tokens=self.options.max_new_tokens, decided=decided),
                     record, keep=key)

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        key = built.keep
        return {"prediction": response.text, "references": [str(key)],
                "score": 1.0 if is_correct(response.text, key) else 0.0, **decided_early(response)}


class PasskeyEvaluator(_Retrieval):
    name = "passkey"
    version = "2"  # 2: typed result (evaluators.results)
    Options = PasskeyOptions
    errors = ErrorRule(cells={"length": "length", "depth_decile": "depth_decile"})
    options: PasskeyOptions

    def __init__(self, options: PasskeyOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self._fitted: dict[int, int] = {}

    def sample_prompt(self, record: dict[str, Any]) -> tuple[str, str]:
        key = int(record["key"])
        return passkey_prompt(key, int(record["garbage_chars"]), int(record["depth_chars"])), needle_text(key)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"passkey/len={n}/trial={t}", {"length": n, "trial": t})
                for n in self.options.lengths for t in range(self.options.trials)]

    def garbage_for(self, tokenizer: Tokenizer, target: int) -> int:
        """G for a target length, probed with a five-digit key at mid depth."""
        if target not in self._fitted:
            self._fitted[target] = fit_length(
                tokenizer, target, lambda g: self.wrap(tokenizer, passkey_prompt(KEY_RANGE[1], g, g // 2)))
        return self._fitted[target]

    def trial_prompt(self, tokenizer: Tokenizer, target: int, trial: int) -> dict[str, Any]:
        """The trial's prompt: key and depth drawn from a generator seeded by (seed, length, trial)."""
        rng = random.Random(f"{self.options.seed}/{target}/{trial}")
        key = rng.randint(*KEY_RANGE)
        g = self.garbage_for(tokenizer, target)
        p = rng.randint(0, g)
        g, ids = shrink_to_fit(tokenizer, target, g,
                               lambda g2: self.wrap(tokenizer, passkey_prompt(key, g2, min(p, g2))))
        p = min(p, g)
        depth = p / g if g else 0.0
        return {"key": key, "garbage_chars": g, "depth_chars": p, "depth": depth,
                "depth_decile": min(int(depth * 10), 9), "ids": ids,
                "prompt": passkey_prompt(key, g, p)}

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        target = sample.params["length"]
        trial = self.trial_prompt(loaded.tokenizer, target, sample.params["trial"])
        ids = trial.pop("ids")
        trial.pop("prompt")
        return self.request(sample, ids, trial["key"], {
            "length": target, "trial": sample.params["trial"], "prompt_tokens": len(ids),
            "truncated": False, "over_target": len(ids) > target, **trial})

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        """Accuracy overall, per length, and per depth decile within each length: a decile
        pooled over lengths mixes lengths the model reads and lengths it does not, and reads as a
        depth effect that is not there."""
        by_length: dict[int, list] = defaultdict(list)
        cells: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
        for r in records:
            by_length[r["length"]].append(r)
            cells[r["length"]][r["depth_decile"]].append(r)
        lengths = {}
        for n in sorted(by_length):
            lengths[str(n)] = _accuracy(by_length[n])
            over = sum(r["over_target"] for r in by_length[n])
            if over:
                # The protocol's fixed blocks alone are longer than this target.
                lengths[str(n)]["over_target"] = over
        deciles = [series("accuracy", "depth_decile", "fraction", True,
                          _points({str(d): _accuracy(cells[n][d]) for d in sorted(cells[n])}), length=n)
                   for n in sorted(cells)]
        return retrieval_result(self.name, _accuracy(records)["accuracy"], lengths, deciles, {})

    @classmethod
    def typed(cls, accuracy: float | None, by_length: dict[str, dict[str, Any]],
              by_decile: dict[str, dict[str, Any]]) -> TaskResult:
        """Version 1's layout: deciles pooled over every length (the only form its entries hold)."""
        deciles = series("accuracy", "depth_decile", "fraction", True, _points(by_decile))
        return retrieval_result(cls.name, accuracy, by_length, [deciles], {})

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {by_length, by_depth_decile, accuracy} into the entry."""
        return cls.typed(entry["accuracy"], entry["by_length"], entry["by_depth_decile"])

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        if not records:
            return []
        lengths = sorted({r["length"] for r in records})
        cells: dict[tuple[int, int], list[float]] = defaultdict(list)
        for r in records:
            cells[(r["length"], r["depth_decile"])].append(r["score"])
        grid = [[(sum(v) / len(v)) if (v := cells.get((n, d))) else None for n in lengths] for d in range(10)]
        return [heatmap(folder / "passkey.png", grid, [str(n) for n in lengths],
                        [f"{10 * d}-{10 * d + 10}%" for d in range(10)], "passkey accuracy",
                        "target length (tokens)", "depth decile", vmin=0, vmax=1)]


def sentence_boundaries(text: str) -> list[int]:
    """Offsets where a sentence starts: 0, len(text), and after ., !, ?, 。 or a newline
    (and the whitespace that follows)."""
    out = {0, len(text)}
    for m in re.finditer(r"[.!?。\n]\s*", text):
        out.add(m.end())
    return sorted(out)


class NeedleEvaluator(_Retrieval):
    name = "needle"
    version = "2"  # 2: typed result (evaluators.results)
    Options = NeedleOptions
    # a cell's trials share its haystack and depth (only the key differs): clustered by them
    errors = ErrorRule(cells={"length": "length", "depth": "depth_percent"}, cluster=("length", "depth_percent"))
    options: NeedleOptions

    def __init__(self, options: NeedleOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self._fitted: dict[tuple[int, int], int] = {}
        self.haystack_unit = GARBAGE_SENTENCE

    def prepare(self, loaded: LoadedModel) -> None:
        name = self.options.haystack_file
        if name is None:
            return
        path = Path(name)
        if not path.is_absolute() and self.data_dir is not None and (self.data_dir / path).is_file():
            path = self.data_dir / path
        if not path.is_file():
            raise EvaluatorError(f"needle: haystack_file {name} not found (looked at {path}); "
                                 "give a UTF-8 text file, absolute or relative to the data directory")
        text = read_text(path, "needle: haystack_file").strip()
        if not text:
            raise EvaluatorError(f"needle: haystack_file {path} is empty")
        self.haystack_unit = text

    def haystack(self, length: int) -> str:
        sep = " " if self.haystack_unit == GARBAGE_SENTENCE else "\n"
        return repeated(self.haystack_unit, length, sep)

    def prompt(self, key: int, g: int, depth_pct: int) -> str:
        text = self.haystack(g)
        target = g * depth_pct / 100
        b = min(sentence_boundaries(text), key=lambda x: (abs(x - target), x))
        return "\n".join([INTRO, text[:b], needle_text(key), text[b:], QUESTION])

    def sample_prompt(self, record: dict[str, Any]) -> tuple[str, str]:
        self.prepare(None)  # type: ignore[arg-type]  # reads only the haystack file option
        key = int(record["key"])
        return self.prompt(key, int(record["haystack_chars"]), int(record["depth_percent"])), needle_text(key)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        return [Sample(f"needle/len={n}/depth={d}/trial={t}", {"length": n, "depth": d, "trial": t})
                for n in o.lengths for d in o.depths for t in range(o.trials)]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        n, d, t = sample.params["length"], sample.params["depth"], sample.params["trial"]
        tok = loaded.tokenizer
        rng = random.Random(f"{self.options.seed}/{n}/{d}/{t}")
        key = rng.randint(*KEY_RANGE)
        if (n, d) not in self._fitted:
            self._fitted[(n, d)] = fit_length(tok, n, lambda g: self.wrap(tok, self.prompt(KEY_RANGE[1], g, d)))
        g, ids = shrink_to_fit(tok, n, self._fitted[(n, d)], lambda g2: self.wrap(tok, self.prompt(key, g2, d)))
        return self.request(sample, ids, key, {
            "length": n, "depth_percent": d, "trial": t, "key": key, "haystack_chars": g,
            "prompt_tokens": len(ids), "truncated": False, "over_target": len(ids) > n})

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        cells: dict[tuple[int, int], list] = defaultdict(list)
        for r in records:
            cells[(r["length"], r["depth_percent"])].append(r)
        grid: dict[str, dict[str, Any]] = defaultdict(dict)
        for (n, d), rs in sorted(cells.items()):
            grid[str(n)][str(d)] = _accuracy(rs)
        by_length = defaultdict(list)
        for r in records:
            by_length[r["length"]].append(r)
        by_depth = defaultdict(list)
        for r in records:
            by_depth[r["depth_percent"]].append(r)
        return self.typed(_accuracy(records)["accuracy"],
                          {str(n): _accuracy(rs) for n, rs in sorted(by_length.items())}, dict(grid),
                          {str(d): _accuracy(rs) for d, rs in sorted(by_depth.items())})

    @classmethod
    def typed(cls, accuracy: float | None, by_length: dict[str, dict[str, Any]],
              grid: dict[str, dict[str, dict[str, Any]]], by_depth: dict[str, dict[str, Any]]) -> TaskResult:
        """The grid (length -> depth -> cell) as one series along length per depth."""
        depths = sorted({int(d) for cells in grid.values() for d in cells})
        per_depth = [series("accuracy", "length", "fraction", True,
                            [(int(n), c[str(d)]["accuracy"], c[str(d)]["n"]) for n, c in grid.items() if str(d) in c],
                            depth=d) for d in depths]
        overall = series("accuracy", "depth", "fraction", True, _points(by_depth))
        return retrieval_result(cls.name, accuracy, by_length, [overall, *per_depth], {})

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {grid, by_length, accuracy} into the entry (no per-depth totals:
        they are summed from the grid)."""
        by_depth: dict[str, dict[str, Any]] = {}
        for cells in entry["grid"].values():
            for d, c in cells.items():
                acc = by_depth.setdefault(d, {"hits": 0.0, "n": 0})
                acc["hits"] += (c["accuracy"] or 0.0) * c["n"]
                acc["n"] += c["n"]
        depth_cells = {d: {"accuracy": v["hits"] / v["n"] if v["n"] else None, "n": v["n"]}
                       for d, v in sorted(by_depth.items(), key=lambda kv: int(kv[0]))}
        return cls.typed(entry["accuracy"], entry["by_length"], entry["grid"], depth_cells)

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        if not records:
            return []
        lengths = sorted({r["length"] for r in records})
        depths = sorted({r["depth_percent"] for r in records})
        cells = {(p.key, s.at["depth"]): p.value for s in result.series if "depth" in s.at for p in s.points}
        values = [[cells.get((n, d)) for n in lengths] for d in depths]
        return [heatmap(folder / "needle.png", values, [str(n) for n in lengths], [f"{d}%" for d in depths],
                        "needle accuracy", "length (tokens)", "depth (% of haystack)", vmin=0, vmax=1)]
