"""Heatmap PNGs with matplotlib (Agg backend: no display on servers).

matplotlib is imported when the first plot is drawn, or ahead of it on a background thread
(`import_ahead`, which `evaluators.suite.draw_ahead` calls): its import (0.7 s here, more where
Python compiles its bytecode at every start) then overlaps loading the weights and running
the model instead of adding to every `lctx eval` and worker start."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (imported once; a second thread waits for the first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def import_ahead() -> None:
    """Import matplotlib on a daemon thread, so the first plot finds it loaded."""
    threading.Thread(target=pyplot, name="lctx-import-plots", daemon=True).start()


def heatmap(
    path: Path,
    values: Sequence[Sequence[float | None]],
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    title: str,
    xlabel: str,
    ylabel: str,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Path:
    """values[y][x] (None -> blank cell), annotated when small enough to read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.array([[np.nan if v is None else float(v) for v in row] for row in values], dtype=float)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(x_labels) + 2), max(3.0, 0.4 * len(y_labels) + 1.5)))
    im = ax.imshow(data, aspect="auto", origin="lower", cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(x_labels)), labels=list(x_labels), rotation=45 if len(x_labels) > 8 else 0)
    ax.set_yticks(range(len(y_labels)), labels=list(y_labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if data.size <= 200:
        for (y, x), v in np.ndenumerate(data):
            if not np.isnan(v):
                ax.text(x, y, f"{v:.2g}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def lines(path: Path, x: Sequence[float], series: dict[str, Sequence[float | None]], title: str,
          xlabel: str, ylabel: str = "") -> Path:
    """One line per series against x (log-scaled x: lengths span orders of magnitude)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, ys in series.items():
        ax.plot(x, [np.nan if y is None else y for y in ys], marker="o", label=name)
    if len(x) > 1 and min(x) > 0:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def average_with_threshold(path: Path, x: Sequence[int], y: Sequence[float | None],
                           intervals: Sequence[Sequence[float] | None], threshold: float, title: str,
                           xlabel: str, ylabel: str) -> Path:
    """One score against length (log2 x) with its 95% intervals as error bars and a dashed
    horizontal threshold line, both labelled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ys = np.array([np.nan if v is None else v for v in y], dtype=float)
    low = [v - iv[0] if iv else 0.0 for v, iv in zip(ys, intervals, strict=True)]
    high = [iv[1] - v if iv else 0.0 for v, iv in zip(ys, intervals, strict=True)]
    ax.errorbar(list(x), ys, yerr=[low, high], marker="o", capsize=3, label="average over tasks (95% interval)")
    ax.axhline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:g}")
    if len(x) > 1 and min(x) > 0:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(x), labels=[str(n) for n in x])
    ax.set_ylim(0, 100)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
