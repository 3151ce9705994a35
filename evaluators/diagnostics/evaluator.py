"""Attention diagnostics from the model's real attention (protocols.md,
"Attention diagnostics"), per layer and head, against length:

- sink rate at eps 0.2 and 0.3 (Gu et al.'s script, the softpick paper): per sample,
  each head's mean first-key weight mean_i a_i0 is compared with eps, and the indicator
  is averaged over samples, layers and heads (threshold per sample, then average);
- sink ratio: mean_i b_i0 / mean_i (1 / n_i), b the l1-normalised |a|;
- sparsity: fraction of causal entries that are exactly zero;
- effective entropy H_i of b_i and dispersion H_i / log n_i;
- negative first-key weight: fraction of rows with a_i0 < 0;
- massive activations: max, min, kurtosis of the hidden states after each layer
  (`hidden_states: hf`: the embeddings, each layer's output but the last and the final
  norm's output, as transformers' output_hidden_states and the softpick paper).

Inputs are natural text by default, as the papers measure: consecutive windows of the
shipped public-domain text (`evaluators/texts/`, or `text_file`), every sample starting
with BOS (the preset gu2024: Gu et al.'s 100 samples of 64 tokens); `inputs: passkey`
uses passkey prompts instead.

Rows whose weights are all zero are counted as silent and left out of the
b-based figures. Inputs up to `dense_max` tokens (1024) use dense weights
(`return_weights=True`, the reference oracle) and, when the variant streams
statistics, also check those against the dense ones; longer inputs are
prefilled in chunks with streaming `RowStats` (`collect_stats=True`), so no
N x N matrix exists. A variant that does not stream statistics yet gets
attention figures only up to `dense_max`; the record names the path used."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from checkpoints.attention.stats import RowStats, stats_from_weights
from checkpoints.loading import LoadedModel
from evaluators.data import read_text
from evaluators.diagnostics.options import DiagnosticsOptions
from evaluators.errors import EvaluatorError
from evaluators.passkey.evaluator import PasskeyEvaluator
from evaluators.plots import heatmap, lines
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Evaluator, Sample

DEFAULT_TEXT = Path(__file__).parent.parent / "texts" / "alice_in_wonderland.txt"

EPS = (0.2, 0.3)
HEAD_FIGURES = ("first_weight", "sink_ratio", "sparsity", "entropy", "dispersion", "negative_first")
# The model-level figures a result reports per length (units in the protocol).
SUMMARY_FIGURES = ("sink_rate@0.2", "sink_rate@0.3", "sink_ratio", "sparsity", "entropy", "dispersion",
                   "negative_first", "kurtosis")
UNITS = {"sink_ratio": "ratio", "entropy": "nats", "kurtosis": "kurtosis"}


class RowAccumulator:
    """Per-head sums over rows (and chunks) of one layer's RowStats."""

    def __init__(self) -> None:
        self.s: dict[str, torch.Tensor] = {}

    def add(self, rs: RowStats) -> None:
        a0 = rs.first.double()  # (B, H, T)
        live = rs.abs_sum > 0
        b0 = torch.where(live, rs.first.abs().double() / rs.abs_sum.double().clamp_min(1e-300), 0.0)
        inv_n = torch.where(live, 1.0 / rs.visible.double().clamp_min(1), 0.0)
        logn = torch.log(rs.visible.double().clamp_min(1))
        disp_ok = live & (rs.visible > 1)
        parts = {
            "rows": torch.ones_like(a0),
            "first": a0,
            "neg_first": (a0 < 0).double(),
            "live": live.double(),
            "b0": b0,
            "inv_n": inv_n,
            "zeros": rs.zeros.double(),
            "visible": rs.visible.double(),
            "entropy": torch.where(live, rs.entropy.double(), 0.0),
            "disp": torch.where(disp_ok, rs.entropy.double() / logn.clamp_min(1e-300), 0.0),
            "disp_rows": disp_ok.double(),
        }
        for k, v in parts.items():
            total = v.sum(dim=(0, 2))  # (H,)
            self.s[k] = self.s[k] + total if k in self.s else total

    def figures(self) -> dict[str, list[float]]:
        s = self.s
        live = s["live"].clamp_min(1)
        return {
            "first_weight": (s["first"] / s["rows"]).tolist(),
            "sink_ratio": ((s["b0"] / live) / (s["inv_n"] / live).clamp_min(1e-300)).tolist(),
            "sparsity": (s["zeros"] / s["visible"].clamp_min(1)).tolist(),
            "entropy": (s["entropy"] / live).tolist(),
            "dispersion": (s["disp"] / s["disp_rows"].clamp_min(1)).tolist(),
            "negative_first": (s["neg_first"] / s["rows"]).tolist(),
            "silent_rows": (s["rows"] - s["live"]).tolist(),
        }


class Moments:
    """max, min and the first four raw moments of a stream of values (float64)."""

    def __init__(self) -> None:
        self.n, self.s1, self.s2, self.s3, self.s4 = 0, 0.0, 0.0, 0.0, 0.0
        self.max, self.min = -math.inf, math.inf

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().double().flatten()
        self.n += x.numel()
        self.s1 += float(x.sum())
        self.s2 += float((x**2).sum())
        self.s3 += float((x**3).sum())
        self.s4 += float((x**4).sum())
        self.max, self.min = max(self.max, float(x.max())), min(self.min, float(x.min()))

    def as_dict(self) -> dict[str, float]:
        return {"n": self.n, "s1": self.s1, "s2": self.s2, "s3": self.s3, "s4": self.s4,
                "max": self.max, "min": self.min}


def kurtosis(m: dict[str, float]) -> float | None:
    """Pearson kurtosis E[(x - mu)^4] / var^2 from raw moment sums."""
    n = m["n"]
    if not n:
        return None
    mu = m["s1"] / n
    e2, e3, e4 = m["s2"] / n, m["s3"] / n, m["s4"] / n
    var = e2 - mu * mu
    if var <= 0:
        return None
    return (e4 - 4 * mu * e3 + 6 * mu * mu * e2 - 3 * mu**4) / var**2


def merge_moments(ms: list[dict[str, float]]) -> dict[str, float]:
    out = {"n": 0, "s1": 0.0, "s2": 0.0, "s3": 0.0, "s4": 0.0, "max": -math.inf, "min": math.inf}
    for m in ms:
        for k in ("n", "s1", "s2", "s3", "s4"):
            out[k] += m[k]
        out["max"], out["min"] = max(out["max"], m["max"]), min(out["min"], m["min"])
    return out


def causal_visible(t: int, s: int, start: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    """(1, 1, T, S) True where key j is visible to query i: j <= start + i and, with a
    sliding window W, j > start + i - W (keys outside the window are not zeros of the head)."""
    i = torch.arange(t, device=device)[:, None] + start
    j = torch.arange(s, device=device)[None, :]
    visible = j <= i
    if window is not None:
        visible &= j > i - window
    return visible[None, None]


def hidden_of_interest(model: Any, x: torch.Tensor, hidden: list[torch.Tensor], which: str) -> list[torch.Tensor]:
    """The hidden states the massive-activation figures describe: `layers`, the residual stream
    after each layer; `hf`, transformers' output_hidden_states (embeddings, the output of each
    layer but the last, then the final norm's output)."""
    if which == "layers":
        return hidden
    return [model.embed_tokens(x), *hidden[:-1], model.norm(hidden[-1])]


@torch.inference_mode()
def measure(loaded: LoadedModel, ids: list[int], dense: bool, chunk: int,
            hidden_states: str = "layers") -> dict[str, Any]:
    """One input's per-layer, per-head figures and hidden-state moments."""
    model = loaded.model
    n_layers = len(model.layers)
    x = torch.tensor([ids], dtype=torch.long, device=model.device)
    stats_acc = [RowAccumulator() for _ in range(n_layers)]
    moments = [Moments() for _ in range(n_layers + (hidden_states == "hf"))]
    have_stats = True
    dense_acc: list[RowAccumulator] | None = None
    if dense:
        hidden: list[torch.Tensor] = []
        _, ctx = model(x, logits_for="last", return_weights=True, hidden_states=hidden)
        if len(ctx.weights) != n_layers:
            raise EvaluatorError(f"diagnostics: the {loaded.describe()['variant']} attention returned no dense "
                                 "weights (return_weights=True); it cannot be diagnosed yet")
        dense_acc = [RowAccumulator() for _ in range(n_layers)]
        for layer, w in enumerate(ctx.weights):
            vis = causal_visible(w.shape[2], w.shape[3], 0, w.device, loaded.config.window_for(layer))
            dense_acc[layer].add(stats_from_weights(w, vis, layer))
        # The streaming statistics on their own pass (asking for weights may route to the dense path).
        _, sctx = model(x, logits_for="last", collect_stats=True)
        have_stats = len(sctx.stats) == n_layers
        for rs in sctx.stats if have_stats else []:
            stats_acc[rs.layer].add(rs)
        for layer, h in enumerate(hidden_of_interest(model, x, hidden, hidden_states)):
            moments[layer].add(h)
    else:
        cache = model.new_cache()
        for lo in range(0, len(ids), chunk):
            hidden = []
            _, ctx = model(x[:, lo : lo + chunk], cache, logits_for="last", collect_stats=True,
                           hidden_states=hidden, rope_length=len(ids))
            if len(ctx.stats) != n_layers:
                have_stats = False
            for rs in ctx.stats:
                stats_acc[rs.layer].add(rs)
            for layer, h in enumerate(hidden_of_interest(model, x[:, lo : lo + chunk], hidden, hidden_states)):
                moments[layer].add(h)
    out: dict[str, Any] = {"moments": [m.as_dict() for m in moments]}
    if dense_acc is not None:
        out["path"] = "dense"
        out["layers"] = [a.figures() for a in dense_acc]
        if have_stats:
            streamed = [a.figures() for a in stats_acc]
            out["stats_vs_dense_max_abs_diff"] = max(
                abs(a - b) for ld, ls in zip(out["layers"], streamed, strict=True)
                for k in HEAD_FIGURES for a, b in zip(ld[k], ls[k], strict=True))
    elif have_stats:
        out["path"] = "stats"
        out["layers"] = [a.figures() for a in stats_acc]
    else:
        out["path"] = "unavailable"  # the variant streams no statistics yet and the input is too long for dense
        out["layers"] = None
    return out


def sink_rate(per_sample_layers: list[list[dict[str, list[float]]]], eps: float) -> float | None:
    """Gu et al.'s sink rate: per sample, layer and head, whether the head's mean first-key
    weight exceeds eps; the mean of that indicator over samples, layers and heads."""
    hits = [float(v > eps) for sample in per_sample_layers for layer in sample for v in layer["first_weight"]]
    return sum(hits) / len(hits) if hits else None


def summarise_heads(per_sample_layers: list[list[dict[str, list[float]]]]) -> dict[str, Any]:
    """Mean over samples of each layer/head figure, the sink rates (thresholded per
    sample, then averaged) and the model-level summaries."""
    n = len(per_sample_layers)
    layers = []
    for l_idx in range(len(per_sample_layers[0])):
        fig = {}
        for k in (*HEAD_FIGURES, "silent_rows"):
            heads = zip(*(s[l_idx][k] for s in per_sample_layers), strict=True)
            fig[k] = [sum(v) / n for v in heads]
        layers.append(fig)
    every = lambda k: [v for layer in layers for v in layer[k]]  # noqa: E731
    mean = lambda vs: sum(vs) / len(vs) if vs else None  # noqa: E731
    out = {f"sink_rate@{eps}": sink_rate(per_sample_layers, eps) for eps in EPS}
    out.update({
        "sink_ratio": mean(every("sink_ratio")),
        "sparsity": mean(every("sparsity")),
        "entropy": mean(every("entropy")),
        "dispersion": mean(every("dispersion")),
        "negative_first": mean(every("negative_first")),
        "silent_rows": sum(every("silent_rows")),
        "per_layer": layers,
    })
    return out


class DiagnosticsEvaluator(Evaluator):
    name = "diagnostics"
    # 2: typed result (evaluators.results); 3: sink rate thresholded per sample, natural-text inputs each
    #    starting with BOS by default, hidden_states option, a plot per series
    version = "3"
    Options = DiagnosticsOptions
    options: DiagnosticsOptions

    def __init__(self, options: DiagnosticsOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.text_ids: list[int] | None = None

    def text_path(self) -> Path:
        name = self.options.text_file
        if name is None:
            return DEFAULT_TEXT
        path = Path(name)
        if not path.is_absolute() and self.data_dir is not None and (self.data_dir / path).is_file():
            path = self.data_dir / path
        if not path.is_file():
            raise EvaluatorError(f"diagnostics: text_file {name} not found (looked at {path})")
        return path

    def prepare(self, loaded: LoadedModel) -> None:
        if self.options.inputs != "text":
            return
        path = self.text_path()
        self.text_ids = loaded.tokenizer.encode(read_text(path, "diagnostics: text_file"),
                                                add_special_tokens=False)
        longest = max(self.options.lengths)
        if len(self.text_ids) < longest:
            raise EvaluatorError(f"diagnostics: {path} has {len(self.text_ids)} tokens, fewer than the longest "
                                 f"length {longest}; give a longer text_file or shorter lengths")

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"diagnostics/len={n}/sample={i}", {"length": n, "sample": i})
                for n in self.options.lengths for i in range(self.options.samples)]

    def inputs(self, loaded: LoadedModel, length: int, i: int) -> list[int]:
        """Natural text: BOS (when the model has one) and the i-th consecutive window of the
        text, so every sample starts with BOS as in the papers (windows wrap around a text
        shorter than samples x length); or a passkey prompt of the protocol."""
        if self.text_ids is not None:
            bos = [loaded.tokenizer.bos_id] if loaded.tokenizer.bos_id is not None else []
            n = length - len(bos)
            start = (i * n) % max(1, len(self.text_ids) - n + 1)
            return bos + self.text_ids[start : start + n]
        passkey = PasskeyEvaluator(PasskeyEvaluator.validate({"seed": self.options.seed, "lengths": [length]}))
        return passkey.trial_prompt(loaded.tokenizer, length, i)["ids"][:length]  # the fixed blocks may exceed short targets

    def run_sample(self, loaded: LoadedModel, sample: Sample) -> dict[str, Any]:
        n = sample.params["length"]
        ids = self.inputs(loaded, n, sample.params["sample"])
        dense = len(ids) <= self.options.dense_max
        m = measure(loaded, ids, dense, self.options.chunk_size, self.options.hidden_states)
        return {"length": n, "prompt_tokens": len(ids), "truncated": False, "prediction": None,
                "references": None, "score": None, **m}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_length: dict[str, Any] = {}
        for n in self.options.lengths:
            rs = [r for r in records if r["length"] == n]
            if not rs:
                continue
            per_layer_m = [merge_moments([r["moments"][i] for r in rs]) for i in range(len(rs[0]["moments"]))]
            everything = merge_moments(per_layer_m)
            entry: dict[str, Any] = {
                "path": sorted({r["path"] for r in rs}),
                "inputs": self.options.inputs, "hidden_states": self.options.hidden_states,
                "mean_tokens": sum(r["prompt_tokens"] for r in rs) / len(rs),
                "massive_activations": {
                    "max": everything["max"], "min": everything["min"], "kurtosis": kurtosis(everything),
                    "per_layer": [{"max": m["max"], "min": m["min"], "kurtosis": kurtosis(m)} for m in per_layer_m],
                },
            }
            with_layers = [r["layers"] for r in rs if r["layers"] is not None]
            if with_layers:
                entry.update(summarise_heads(with_layers))
            checks = [r["stats_vs_dense_max_abs_diff"] for r in rs if "stats_vs_dense_max_abs_diff" in r]
            if checks:
                entry["stats_vs_dense_max_abs_diff"] = max(checks)
            entry["n"] = len(rs)
            by_length[str(n)] = entry
        return self.typed(by_length)

    @classmethod
    def typed(cls, by_length: dict[str, Any]) -> TaskResult:
        """Measurements, not scores (higher_is_better None): each figure at the longest length
        as a metric and against length as a series; per-layer detail stays in `extra`."""
        def figure(entry: dict[str, Any], k: str) -> float | None:
            return entry.get("massive_activations", {}).get("kurtosis") if k == "kurtosis" else entry.get(k)

        keys = sorted(by_length, key=int)
        longest = keys[-1] if keys else None
        top = by_length[longest] if longest else {}
        n_of = lambda e: e.get("n", 0)  # noqa: E731 - version 1 did not record n
        metrics = [metric(k, figure(top, k), None, UNITS.get(k, "fraction"), n_of(top),
                          f"at the longest length ({longest} tokens)") for k in SUMMARY_FIGURES]
        out = [series(k, "length", UNITS.get(k, "fraction"), None,
                      [(int(n), figure(by_length[n], k), n_of(by_length[n])) for n in keys]) for k in SUMMARY_FIGURES]
        line = ", ".join(f"{k} {fmt(m.value, 2)}" for k, m in zip(SUMMARY_FIGURES, metrics, strict=True)
                         if k in ("sink_rate@0.3", "sparsity", "dispersion", "kurtosis"))
        return TaskResult(headline="sink_rate@0.3", metrics=metrics, series=out,
                          summary=f"at {longest} tokens: {line}", extra={"by_length": by_length})

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {by_length, summary} into the entry."""
        return cls.typed(entry["by_length"])

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        out = []
        by_length = result.extra["by_length"]
        if by_length:
            xs = sorted(by_length, key=int)
            out.append(lines(folder / "diagnostics_vs_length.png", [int(n) for n in xs],
                             {k: [by_length[n].get(k) for n in xs]
                              for k in ("dispersion", "sparsity", "sink_rate@0.3", "negative_first")},
                             "attention against length", "input length (tokens)", "fraction"))
            for s in result.series:  # every reported series, one plot each
                out.append(lines(folder / f"diagnostics_{s.name.replace('@', '_at_')}.png",
                                 [int(p.key) for p in s.points], {s.name: [p.value for p in s.points]},
                                 f"{s.name} against length", "input length (tokens)", f"{s.name} ({s.unit})"))
        for n, entry in by_length.items():
            ma = entry["massive_activations"]["per_layer"]
            first = 0 if entry.get("hidden_states") == "hf" else 1  # hf: index 0 is the embeddings
            out.append(lines(folder / f"diagnostics_activations_len{n}.png", list(range(first, first + len(ma))),
                             {k: [m[k] for m in ma] for k in ("max", "min", "kurtosis")},
                             f"hidden states ({n} tokens)", "hidden state (after layer; 0 = embeddings)", "value"))
            layers = entry.get("per_layer")
            if not layers:
                continue
            heads = [str(h) for h in range(len(layers[0]["first_weight"]))]
            names = [str(i) for i in range(len(layers))]
            for fig, title in (("first_weight", "mean weight on the first key"), ("sparsity", "exact-zero sparsity"),
                               ("dispersion", "dispersion ratio H / log n"), ("sink_ratio", "sink ratio"),
                               ("entropy", "effective entropy (nats)"),
                               ("negative_first", "fraction of rows with a negative first-key weight")):
                out.append(heatmap(folder / f"diagnostics_{fig}_len{n}.png",
                                   [layer[fig] for layer in layers], heads, names,
                                   f"{title} ({n} tokens)", "head", "layer"))
        return out
