"""The stopping rule of the sequential effective-length search (docs/protocols/sequential.md).

A cell (one length) passes when the mean of its unit scores, each in [0, 1], is at least a
threshold m. Two test supermartingales run side by side on the scores in the protocol's
order: the capital of a bettor who bets on "the mean is above m",

    K_t = prod_{i<=t} (1 + lambda_i (x_i - m)),        0 <= lambda_i <= c / m,

and of one who bets on "below m", K'_t = prod (1 - lambda'_i (x_i - m)) with
0 <= lambda'_i <= c / (1 - m). When the mean is at most m, K is a nonnegative
supermartingale with K_0 = 1 for every predictable choice of lambda, so by Ville's
inequality P(sup_t K_t >= 1/a) <= a: declaring "pass" when K reaches 1/a is wrong with
probability at most a, whenever the sampling stops (anytime-valid: looks after every block
cost nothing). The same holds for K' and "fail". At most one of the two declarations is
wrong for a given mean, so the cell's error is at most a. This is testing by betting
(Waudby-Smith and Ramdas, JRSS-B 2024; Shafer 2021); unlike Hoeffding's bound it adapts
to the variance and to means near 0 or 1 (a model that answers every sample right), where
it approaches the likelihood-ratio test of Bernoulli(1) against Bernoulli(m).

The bets follow the growth-rate-adaptive (GRAPA) plug-in: lambda = (mu - m) /
(var + (mu - m)^2) from the mean and variance of the scores seen so far, shrunk towards
1/2 by one pseudo-observation so the first bets are small, and clipped at c = 0.9 of the
largest bet that keeps the capital nonnegative. Only past scores enter a bet, which is
all the validity argument needs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

CLIP = 0.9  # share of the largest bet that keeps the capital nonnegative
PRIOR_WEIGHT = 1.0  # pseudo-observations at 1/2 behind the plug-in mean and variance


def _bet(mean: float, var: float, gap: float, limit: float) -> float:
    """GRAPA's bet for an edge `gap` (> 0: on our side), clipped to [0, limit]."""
    if gap <= 0:
        return 0.0
    return min(gap / (var + gap * gap), limit)


@dataclass
class CellTest:
    """Both capital processes of one cell against the threshold `m`, fed score by score."""

    m: float
    level: float  # the cell's error budget a: a declaration needs capital >= 1 / level
    up: float = 1.0  # K: evidence that the mean is >= m
    down: float = 1.0  # K': evidence that the mean is < m
    up_max: float = 1.0
    down_max: float = 1.0
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    scores: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.m < 1:
            raise ValueError(f"threshold {self.m} must lie strictly between 0 and 1 (scores are in [0, 1])")
        if not 0 < self.level < 1:
            raise ValueError(f"error budget {self.level} must lie in (0, 1)")

    def feed(self, x: float) -> None:
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"score {x} outside [0, 1]")
        w = self.n + PRIOR_WEIGHT
        mean = (self.total + 0.5 * PRIOR_WEIGHT) / w
        var = (self.squares - 2 * mean * self.total + self.n * mean * mean + 0.25 * PRIOR_WEIGHT) / w
        lam_up = _bet(mean, var, mean - self.m, CLIP / self.m)
        lam_down = _bet(mean, var, self.m - mean, CLIP / (1 - self.m))
        self.up *= 1 + lam_up * (x - self.m)
        self.down *= 1 - lam_down * (x - self.m)
        self.up_max = max(self.up_max, self.up)
        self.down_max = max(self.down_max, self.down)
        self.n += 1
        self.total += x
        self.squares += x * x
        self.scores.append(x)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def verdict(self) -> bool | None:
        """True: the mean is >= m; False: it is < m; None: not yet decided at this level."""
        if self.up_max >= 1 / self.level:
            return True
        if self.down_max >= 1 / self.level:
            return False
        return None

    def p_value(self) -> float:
        """Anytime-valid p-value of the declaration made (or the stronger side so far)."""
        return min(1.0, 1 / max(self.up_max, self.down_max))


def running_max_capital(scores: np.ndarray, m: np.ndarray, sign: int) -> np.ndarray:
    """sup_t of the capital betting on mean > m (sign +1) or < m (sign -1), for every m at once,
    with CellTest's bets: the confidence interval of a cell is read off it."""
    capital = np.ones_like(m)
    best = np.ones_like(m)
    total = squares = 0.0
    for n, x in enumerate(scores):
        w = n + PRIOR_WEIGHT
        mean = (total + 0.5 * PRIOR_WEIGHT) / w
        var = (squares - 2 * mean * total + n * mean * mean + 0.25 * PRIOR_WEIGHT) / w
        gap = sign * (mean - m)
        limit = CLIP / (m if sign > 0 else 1 - m)
        lam = np.where(gap > 0, np.minimum(gap / (var + gap * gap), limit), 0.0)
        capital = capital * (1 + sign * lam * (x - m))
        best = np.maximum(best, capital)
        total += x
        squares += x * x
    return best


def confidence_interval(scores: list[float], level: float, resolution: int = 1000) -> tuple[float, float] | None:
    """The means in [0, 1] neither bettor rejects at `level / 2` each: a (1 - level)
    confidence interval, valid at whatever sample size the search stopped (on a grid of
    `resolution` steps, widened outward by one step)."""
    if not scores:
        return None
    grid = np.linspace(0, 1, resolution + 1)[1:-1]
    x = np.asarray(scores, dtype=float)
    kept = (running_max_capital(x, grid, +1) < 2 / level) & (running_max_capital(x, grid, -1) < 2 / level)
    if not kept.any():  # cannot happen for a consistent process; keep the point estimate
        mean = float(x.mean())
        return mean, mean
    inside = grid[kept]
    step = 1 / resolution
    return float(max(0.0, inside.min() - step)), float(min(1.0, inside.max() + step))


def bisection_steps(candidates: int) -> int:
    """Cells a bisection over `candidates` lengths tests at most: ceil(log2(candidates + 1))."""
    return max(1, math.ceil(math.log2(candidates + 1)))
