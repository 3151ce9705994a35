"""The contract of a task's result: named metrics, series and a summary line.

Every evaluator's `aggregate` returns a `TaskResult`. results.json, the leaderboard,
the CLI's table and the plots read only this: no per-task branches outside the
evaluators. Each metric says whether higher is better (None: a measurement with no
better direction, such as an attention statistic), its unit and how many samples are
behind it; a series is one metric along an axis (length, dataset, depth, ...), and a
2-D grid is a series per value of the other axis (`at`, e.g. {"depth": 50}).

`run_evaluator` writes the run metadata (task, version, options, config, model, seed,
samples, plots) next to the result under the key "result". `evaluators.registry.task_result`
reads an entry of either layout: results written before the contract spread each evaluator's
aggregates into the entry, and each evaluator converts those with `legacy_result`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

Axis = Literal["length", "dataset", "depth", "depth_decile", "category", "bucket", "layer"]
RESULT_KEY = "result"


ErrorMethod = Literal["clt", "clustered", "bootstrap", "none"]


class ErrorBar(BaseModel):
    """A value's sampling uncertainty (evaluators/uncertainty.py computes it from the task's
    `ErrorRule`): its standard error and 95% interval, and how they were computed. `method`
    "none" carries no numbers and says why (`reason`): a measurement such as a perplexity,
    a count, a value with no samples. Never a zero standing for "not computed"."""

    stderr: float | None = Field(description="standard error of the value (None with method 'none')")
    low: float | None = Field(description="lower end of the 95% interval")
    high: float | None = Field(description="upper end of the 95% interval")
    method: ErrorMethod = Field(description="clt: mean of per-sample scores, normal interval; clustered: the same "
                                            "with cluster-robust errors (samples sharing a context); bootstrap: "
                                            "seeded resampling through the task's aggregate (percentile interval); "
                                            "none: not a sampled quantity (see reason)")
    cluster: str | None = Field(None, description="the record fields naming a shared context (e.g. 'transcript')")
    clusters: int | None = Field(None, ge=0, description="distinct contexts behind the value")
    resamples: int | None = Field(None, ge=0, description="bootstrap resamples")
    reason: str = ""

    def text(self, digits: int = 3, unit: str | None = None) -> str:
        """`± 0.026` (the standard error) or `(no error: <reason>)`."""
        if self.stderr is None:
            return f"(no error: {self.reason})" if self.reason else ""
        if unit in COUNTED_UNITS:
            return f"± {self.stderr:.0f}"
        return f"± {fmt(self.stderr, digits)}"


class Metric(BaseModel):
    name: str
    value: float | None
    higher_is_better: bool | None = Field(description="None: a measurement, not a score")
    unit: str = Field(description="e.g. 'fraction', 'score (0-100)', 'perplexity'")
    n: int = Field(ge=0, description="samples behind the value")
    description: str = ""
    error: ErrorBar | None = Field(None, description="its uncertainty (None: a result written before lctx "
                                                     "recorded errors)")


class Point(BaseModel):
    key: str | int
    value: float | None
    n: int = Field(ge=0)
    error: ErrorBar | None = None


class Series(BaseModel):
    name: str
    axis: Axis
    unit: str
    higher_is_better: bool | None
    points: list[Point]
    at: dict[str, str | int] = Field(default_factory=dict,
                                     description="the other coordinates of a 2-D grid, e.g. {'depth': 50}")

    def label(self) -> str:
        """`accuracy` or `accuracy.depth=50`: the series' name with its fixed coordinates."""
        return ".".join([self.name, *(f"{k}={v}" for k, v in sorted(self.at.items()))])


class TaskResult(BaseModel):
    headline: str = Field(description="the metric a leaderboard sorts by")
    metrics: list[Metric]
    series: list[Series] = Field(default_factory=list)
    summary: str = Field(description="one line for tables")
    extra: dict[str, Any] = Field(default_factory=dict, description="task-specific detail; not read by the service")

    @model_validator(mode="after")
    def _consistent(self) -> TaskResult:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metric names repeat: {names}")
        if self.headline not in names:
            raise ValueError(f"headline {self.headline!r} is none of the metrics {names}")
        return self

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)

    def columns(self, select: str | None = None) -> dict[str, tuple[float | None, Metric | Series]]:
        """Flat named values for tables: each metric, and each series point as
        `<series label>.<axis>=<key>`. With `select` (a point key such as a dataset name)
        only the series points at that key, named by their series' label, and the points
        of series fixed at that key (`at`), named `<name>.<axis>=<key>`."""
        return {name: (item.value, source) for name, (item, source, _) in self.column_items(select).items()}

    def column_items(self, select: str | None = None
                     ) -> dict[str, tuple[Metric | Point, Metric | Series, dict[str, str | int]]]:
        """`columns` with each column's metric or point (its value and error) and the
        coordinates of its cell ({} for a metric: every sample; a point's axis key and `at`)."""
        out: dict[str, tuple[Metric | Point, Metric | Series, dict[str, str | int]]] = {}
        if select is None:
            for m in self.metrics:
                out[m.name] = (m, m, {})
        for s in self.series:
            for p in s.points:
                coords = {s.axis: p.key, **s.at}
                if select is None:
                    out[f"{s.label()}.{s.axis}={p.key}"] = (p, s, coords)
                elif str(p.key) == select:
                    out[s.label()] = (p, s, coords)
                elif select in {str(v) for v in s.at.values()}:
                    out[f"{s.name}.{s.axis}={p.key}"] = (p, s, coords)
        return out


def metric(name: str, value: float | None, higher_is_better: bool | None, unit: str, n: int,
           description: str = "") -> Metric:
    return Metric(name=name, value=value, higher_is_better=higher_is_better, unit=unit, n=n,
                  description=description)


def series(name: str, axis: Axis, unit: str, higher_is_better: bool | None,
           points: list[tuple[str | int, float | None, int]], **at: str | int) -> Series:
    return Series(name=name, axis=axis, unit=unit, higher_is_better=higher_is_better, at=at,
                  points=[Point(key=k, value=v, n=n) for k, v, n in points])


COUNTED_UNITS = frozenset({"tokens", "samples", "count"})  # values that are whole numbers by their unit


def fmt(value: float | None, digits: int = 3, unit: str | None = None) -> str:
    """A value for a table or a summary line: whole numbers (a unit that counts, such as an
    effective length in tokens, or any integral value of 1,000 or more) as integers, other
    values of 1,000 or more rounded to a whole number (never `1e+03`), the rest to `digits`
    decimals."""
    if value is None:
        return "-"
    if unit in COUNTED_UNITS and float(value).is_integer():
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def fmt_error(value: float | None, error: ErrorBar | None, digits: int = 3, unit: str | None = None) -> str:
    """`0.930 ± 0.026` (value ± standard error), the value alone where no error was recorded
    (an old result) or none applies (a measurement: said by `ErrorBar.reason` elsewhere)."""
    text = fmt(value, digits, unit)
    if value is None or error is None or error.stderr is None:
        return text
    return f"{text} {error.text(digits, unit)}"
