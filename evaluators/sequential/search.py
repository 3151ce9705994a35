"""Bisection over candidate lengths with the sequential cell test (docs/protocols/sequential.md).

`replay(config, score)` walks the whole search from the start every time it is called,
reading unit scores through `score(length_index, unit_index)` (None: not run yet). It
returns either the next block of units to run or the finished result. The walk looks only
at block boundaries, so it depends on nothing but the scores of the units it consumed: a
run killed mid-block and resumed from the sample log, a run that finds the samples of an
earlier full grid in its folder and a fresh run all take the same decisions on the same
samples. No torch here: the option validation and the simulation test use it directly.

Assumption (stated in every result): the mean score decreases with length, so the cells
that pass form a prefix of the candidates. Bisection then finds the boundary testing at
most ceil(log2(k + 1)) of k cells; the error budget alpha is split evenly over those
tests (and over the reference cell of the relative rule), so by the union bound every
decision of the search is right with probability >= 1 - alpha, and then the effective
length is right. Observations that contradict the assumption are reported."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evaluators.sequential.rule import CellTest, bisection_steps, confidence_interval

# The relative rule's reference cell samples until its confidence interval is this narrow
# (in [0, 1] score units) or its cap is reached.
REFERENCE_WIDTH = 0.1


@dataclass(frozen=True)
class SearchConfig:
    lengths: list[int]  # candidate lengths, ascending
    cap: int  # units per cell at most: the full grid's units per cell
    block: int  # units drawn per look
    alpha: float  # probability of any wrong decision, over the whole search
    threshold: float | None = None  # absolute rule: pass when the mean (in [0, 1]) is >= threshold
    relative: float | None = None  # relative rule: pass when the mean is >= relative * the shortest length's mean

    def __post_init__(self) -> None:
        if (self.threshold is None) == (self.relative is None):
            raise ValueError("give exactly one of threshold and relative")
        if len(self.lengths) < 2 if self.relative is not None else len(self.lengths) < 1:
            raise ValueError("too few candidate lengths")

    @property
    def tests(self) -> int:
        """Decisions the error budget is split over."""
        if self.relative is not None:
            return bisection_steps(len(self.lengths) - 1) + 1
        return bisection_steps(len(self.lengths))

    @property
    def level(self) -> float:
        return self.alpha / self.tests


@dataclass
class Cell:
    length: int
    test: CellTest
    passed: bool | None = None
    decided: bool = False  # by the test (True) or by the point estimate at the cap (False)

    def describe(self, level: float) -> dict[str, Any]:
        ci = confidence_interval(self.test.scores, level)
        return {"length": self.length, "n": self.test.n, "mean": self.test.mean, "threshold": self.test.m,
                "passed": self.passed, "decided": self.decided, "p_value": round(self.test.p_value(), 6),
                "interval": None if ci is None else [round(ci[0], 4), round(ci[1], 4)]}


@dataclass
class SearchState:
    """What the walk reached: the units still needed (`need`, empty when finished)
    and everything decided so far."""

    config: SearchConfig
    need: list[tuple[int, int]] = field(default_factory=list)  # (length index, unit index)
    cells: dict[int, Cell] = field(default_factory=dict)  # by length index, in the order tested
    reference: dict[str, Any] | None = None
    last_pass: int | None = None  # length index
    first_fail: int | None = None

    @property
    def finished(self) -> bool:
        return not self.need

    @property
    def spent(self) -> int:
        """Units consumed (the reference cell included)."""
        return sum(c.test.n for c in self.cells.values())

    @property
    def confident(self) -> bool:
        return self.finished and all(c.decided for c in self.cells.values())

    def effective_length(self) -> int | None:
        return None if self.last_pass is None else self.config.lengths[self.last_pass]

    def bracket(self) -> tuple[int | None, int | None]:
        """[last passing, first failing) in tokens; None: below the shortest / beyond the longest."""
        ls = self.config.lengths
        return (None if self.last_pass is None else ls[self.last_pass],
                None if self.first_fail is None else ls[self.first_fail])

    def monotonicity(self) -> list[str]:
        """Pairs of tested cells whose intervals say a longer length scores higher than a
        shorter one (a contradiction of the assumption), and point-estimate inversions."""
        out = []
        tested = sorted(self.cells.values(), key=lambda c: c.length)
        level = self.config.level
        intervals = {c.length: confidence_interval(c.test.scores, level) for c in tested}
        for i, a in enumerate(tested):
            for b in tested[i + 1:]:
                ia, ib = intervals[a.length], intervals[b.length]
                if ia and ib and ib[0] > ia[1]:
                    out.append(f"{b.length} scores above {a.length} beyond both intervals "
                               f"({b.test.mean:.3f} vs {a.test.mean:.3f})")
                elif a.passed is False and b.passed is True:
                    out.append(f"{a.length} fails and the longer {b.length} passes (point estimates)")
        return out


Score = Callable[[int, int], float | None]


def _run_cell(state: SearchState, index: int, m: float, level: float, score: Score, stop_width: float | None = None
              ) -> Cell | None:
    """Feed block after block of the cell's units until the test decides or the cap is
    reached; None (with `state.need` set) when a unit of the next block is not run yet."""
    cfg = state.config
    cell = Cell(cfg.lengths[index], CellTest(m=m, level=level))
    state.cells[index] = cell
    while cell.test.n < cfg.cap:
        upto = min(cell.test.n + cfg.block, cfg.cap)
        xs = [score(index, u) for u in range(cell.test.n, upto)]
        if any(x is None for x in xs):
            state.need = [(index, u) for u, x in zip(range(cell.test.n, upto), xs, strict=True) if x is None]
            return None
        for x in xs:
            cell.test.feed(float(x))  # type: ignore[arg-type]
        if stop_width is not None:
            ci = confidence_interval(cell.test.scores, level, resolution=200)
            if ci is not None and ci[1] - ci[0] <= stop_width:
                break
        elif cell.test.verdict is not None:
            cell.passed, cell.decided = cell.test.verdict, True
            return cell
    if stop_width is None:  # the cap: the grid's own decision, the point estimate
        cell.passed = (cell.test.mean or 0.0) >= m
    return cell


def replay(config: SearchConfig, score: Score) -> SearchState:
    """The search from the start over the scores known so far (see the module docstring)."""
    state = SearchState(config)
    lo, hi = -1, len(config.lengths)
    level = config.level
    threshold = config.threshold
    if config.relative is not None:
        ref = _run_cell(state, 0, 0.5, level, score, stop_width=REFERENCE_WIDTH)
        if ref is None:
            return state
        ci = confidence_interval(ref.test.scores, level, resolution=1000)
        assert ci is not None
        mean = ref.test.mean or 0.0
        # pass: mean >= share * (reference's upper bound); fail: mean < share * lower bound; between
        # the two the cap decides against share * the reference's point estimate.
        state.reference = {"length": config.lengths[0], "n": ref.test.n, "mean": mean, "interval": list(ci),
                           "share": config.relative}
        ref.passed, ref.decided = mean > 0, True
        if mean <= 0:  # a model scoring 0 at its shortest length has nothing to keep
            state.first_fail = 0
            return state
        lo = 0
        threshold = None
    while hi - lo > 1:
        mid = (lo + hi + 1) // 2
        if threshold is not None:
            cell = _run_cell(state, mid, threshold, level, score)
        else:
            cell = _run_relative(state, mid, level, score)
        if cell is None:
            return state
        if cell.passed:
            lo = mid
        else:
            hi = mid
    state.last_pass = lo if lo >= 0 else None
    state.first_fail = hi if hi < len(config.lengths) else None
    return state


def _run_relative(state: SearchState, index: int, level: float, score: Score) -> Cell | None:
    """A cell of the relative rule: two tests against share * the reference's bounds."""
    cfg, ref = state.config, state.reference
    assert ref is not None and cfg.relative is not None
    low, high = ref["interval"]
    m_pass = min(max(cfg.relative * high, 1e-6), 1 - 1e-6)
    m_fail = min(max(cfg.relative * low, 1e-6), 1 - 1e-6)
    passing = CellTest(m=m_pass, level=level)
    failing = CellTest(m=m_fail, level=level)
    cell = Cell(cfg.lengths[index], passing)
    state.cells[index] = cell
    while passing.n < cfg.cap:
        upto = min(passing.n + cfg.block, cfg.cap)
        xs = [score(index, u) for u in range(passing.n, upto)]
        if any(x is None for x in xs):
            state.need = [(index, u) for u, x in zip(range(passing.n, upto), xs, strict=True) if x is None]
            return None
        for x in xs:
            passing.feed(float(x))  # type: ignore[arg-type]
            failing.feed(float(x))  # type: ignore[arg-type]
        if passing.verdict is True:
            cell.passed, cell.decided = True, True
            return cell
        if failing.verdict is False:
            cell.passed, cell.decided, cell.test = False, True, failing
            return cell
    cell.passed = (passing.mean or 0.0) >= cfg.relative * ref["mean"]
    cell.test = CellTest(m=min(max(cfg.relative * ref["mean"], 1e-6), 1 - 1e-6), level=level)
    for x in passing.scores:
        cell.test.feed(x)
    return cell


def grid_effective_length(means: dict[int, float], threshold: float) -> int | None:
    """The full grid's answer by the same rule: the longest length whose mean is >= threshold."""
    passing = [n for n, v in means.items() if v >= threshold]
    return max(passing, default=None)
