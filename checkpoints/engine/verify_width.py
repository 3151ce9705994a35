"""How wide a decoding step verifies drafted tokens: the width that gives the most expected
tokens per second under the step times this engine measured.

A verifying step runs every row at the same width (its last token plus the longest draft,
shorter drafts padded), so one row's 16-token draft makes a batch of 16 rows compute 17x the
tokens of a plain step. Where a step's cost is mostly per token (the CPU: the output
projection alone is 2 * hidden * vocab FLOPs a token) a wide step pays off only if most rows
keep most of their drafts; where it is mostly per step (reading the weights, the Python of a
step) a wide step is nearly free. Neither holds everywhere, and acceptance varies by task (a
needle copied: nearly every drafted token kept; a random model's ramble: nearly none): on the
decode-heavy benchmark a fixed 16-token draft made 48 of 58 steps verifying steps at 2x a
plain step's time for 6 kept tokens (bench/results/eval_throughput.md).

So the engine fits `seconds = fixed + per_token * tokens` to its own steps (`StepTimes`,
recent steps weighing most) and each row keeps its drafted tokens' acceptance rate
(`prompt_lookup.DraftLength`). A row with acceptance p expects p + p^2 + ... + p^k kept tokens
from a k-token draft (it keeps a draft's tokens up to the first miss); `choose_width`
picks the width (0: a plain step) that maximises (rows + expected kept tokens) / expected
seconds. Greedy outputs do not change: only how many drafted tokens a step checks."""

from __future__ import annotations

from collections.abc import Sequence

# Before a second step size has been timed, the fixed cost of a step in tokens' worth (fixed /
# per_token): a step verifying 16 tokens of each of 6 rows took 2-3 one-token steps on the
# 2-core CPU (bench/results/ruler_e2e_cpu.md): 0.15 s at 6 tokens, 0.4 s at 102.
PRIOR_FIXED_TOKENS = 51.0
# Weight of each older step against the newest (the fit follows the context's growth).
DECAY = 0.95
# The steps timed must differ in size by this much (their sizes' weighted standard deviation
# over their mean) before their line replaces the prior: rows joining and leaving a batch of
# plain steps move its size a little, and a line through nearly one size is noise.
MIN_SPREAD = 0.25


class StepTimes:
    """A weighted least-squares line through (tokens computed, seconds) of the steps timed,
    older ones decaying: the ratio fixed / per_token is all `choose_width` needs. Until
    step sizes apart by `MIN_SPREAD` have been timed the ratio is `PRIOR_FIXED_TOKENS`."""

    def __init__(self, prior_fixed_tokens: float = PRIOR_FIXED_TOKENS, decay: float = DECAY) -> None:
        self.prior, self.decay = prior_fixed_tokens, decay
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        d = self.decay
        self._w, self._x, self._y = d * self._w + 1, d * self._x + tokens, d * self._y + seconds
        self._xx, self._xy = d * self._xx + tokens * tokens, d * self._xy + tokens * seconds

    def fixed_tokens(self) -> float:
        """fixed / per_token of the fitted line; the prior where the steps timed cannot tell
        (one size so far), infinite where tokens look free (a slope <= 0: time does not grow
        with tokens), 0 where the line passes below the origin (all cost per token)."""
        if self._w == 0:
            return self.prior
        spread = self._xx - self._x * self._x / self._w  # weighted variance of the sizes, times the weight
        mean_x = self._x / self._w
        if spread <= (MIN_SPREAD * mean_x) ** 2 * self._w:
            return self.prior
        slope = (self._xy - self._x * self._y / self._w) / spread
        if slope * mean_x <= 1e-9 * abs(self._y / self._w):  # (rounding aside) no slope
            return float("inf")
        fixed = self._y / self._w - slope * mean_x
        return max(0.0, fixed / slope)


def expected_kept(acceptance: float, draft: int) -> float:
    """Tokens kept of a `draft`-token draft, each kept with probability `acceptance` while all
    before it were: p + p^2 + ... + p^draft."""
    if draft <= 0 or acceptance <= 0:
        return 0.0
    if acceptance >= 1:
        return float(draft)
    return acceptance * (1 - acceptance**draft) / (1 - acceptance)


def choose_width(drafts: Sequence[int], acceptance: Sequence[float], fixed_tokens: float) -> int:
    """The most drafted tokens a step verifies per row (0: a plain decode step), given each
    row's draft length and acceptance rate and the step's fixed cost in tokens' worth: the
    width w maximising (rows + sum of expected kept tokens) / (fixed + rows * (w + 1))."""
    rows, longest = len(drafts), max(drafts, default=0)
    if rows == 0 or longest == 0:
        return 0
    if fixed_tokens == float("inf"):
        return longest
    best, best_rate = 0, rows / (fixed_tokens + rows)
    for width in range(1, longest + 1):
        gain = sum(expected_kept(p, min(d, width)) for d, p in zip(drafts, acceptance, strict=True))
        rate = (rows + gain) / (fixed_tokens + rows * (width + 1))
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = width, rate
    return best
