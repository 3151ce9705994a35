"""Token counts for RULER's sizing searches at about one encode per sample (issue #41,
"data off the critical path"); docs/protocols/ruler.md section 5 says what is searched.

NVIDIA's searches encode a whole new prompt for every probe of a binary search. lctx
makes every probe's draws (the random stream must move as NVIDIA's does) but decides most
probes on counts:

- A text is cut into *units* where byte-level BPE pre-tokenizers (GPT-2's, Llama 3's,
  SmolLM2's) never merge across: before a single space between two non-spaces, after a
  single newline between two non-spaces, after an ASCII letter before a hyphen and a letter
  (GPT-2's pattern splits letters from punctuation; Llama 3's may join one punctuation mark
  to the letters after it, never to those before). Its estimate is the sum of its units' counts;
  each distinct unit is counted once per stream, a text's unseen units in one batched call.
  Where every token holding a digit is that digit alone (`digits_alone`: SmolLM2's vocabulary),
  a unit's count does not depend on its digits, and units are counted with every digit read
  as 0: the scripts' fresh random numbers (a niah haystack's thousands of values) are then
  counted once per shape, not once each.
- A probe whose estimate is within `margin` tokens of the limit is encoded for real; a
  farther one is decided on its estimate. The two probes that bracket a search's answer
  (the size taken and the next size up) are always decided by real encodes.
- Every real encode checks the estimate beside it: an error above a quarter of the margin
  means this tokenizer merges across the cuts (SentencePiece's added prefix space, say),
  and `Unreliable` tells the generator to draw the stream again with every probe encoded:
  the result is the same, only slower.

Samples themselves are encoded once each, with the tokenizer's special tokens: that count
is the fit test and the ids are the request the engine runs."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, TypeVar

from checkpoints.tokenizer import Tokenizer

T = TypeVar("T")

# Cut before a space between two non-spaces, after a newline between two non-spaces, and
# between a letter and a hyphen before a letter (NIAH's adjective-noun keys: "tasty|-apple").
UNIT_CUT = re.compile(r"(?<=\S)(?= \S)|(?<=\S\n)(?=\S)|(?<=[A-Za-z])(?=-[A-Za-z])")
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")  # on UTF-8 (str.translate is slow past ASCII)
# A sample's try is estimated only when units not counted yet are at most this share of it,
# and after TRIAL_TRIES tries only while at least one in TRIAL_TRIES was over the limit.
CHEAP = 1 / 16
TRIAL_TRIES = 8
# Whole texts whose estimates equalled their encodes before estimates are taken as exact.
EXACT_AFTER = 3


class Unreliable(Exception):
    """The estimates missed a real count by more than the tokenizer's cuts allow."""


def counted_or_exact(draw: Callable[[bool], list[T]], exact: bool, log: logging.Logger, what: str) -> list[T]:
    """A stream's samples decided on counts (`draw(False)`), drawn again with every probe encoded
    (`draw(True)`: the same samples, slower) when `exact` or when the counts prove unreliable
    for this tokenizer (said in `log`, `what` naming the task and length)."""
    if exact:
        return draw(True)
    try:
        return draw(False)
    except Unreliable as e:
        log.warning("%s: token counts of pieces do not add up with this tokenizer (%s); encoding every probe", what, e)
        return draw(True)


class CountingTokenizer:
    """A tokenizer that tallies its encode calls and the characters they encoded (what
    bench/ruler_build.py reports and the tests bound); everything else passes through.
    A batched encode is one call."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.calls = 0
        self.chars = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls += 1
        self.chars += len(text)
        return self.inner.encode(text, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        self.calls += 1
        self.chars += sum(len(t) for t in texts)
        return encode_batch(self.inner, texts, add_special_tokens)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def encode_batch(tokenizer: Tokenizer, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
    """Every text encoded, in one call where the tokenizer has a batched encode."""
    batch = getattr(tokenizer, "encode_batch", None)
    if batch is not None:
        return batch(list(texts), add_special_tokens=add_special_tokens)
    return [tokenizer.encode(t, add_special_tokens=add_special_tokens) for t in texts]


class TokenCounts:
    """A stream's one way to its tokenizer: real encodes (the ids the model receives, the
    last one kept so a fit test and the request share it) and estimates from unit counts."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.specials = len(tokenizer.encode("", add_special_tokens=True)) - \
            len(tokenizer.encode("", add_special_tokens=False))
        self.units: dict[str, int] = {}  # unit (digits folded where they may be) -> its tokens
        self.fold = DIGITS_AS_ZERO if tokenizer.digits_alone() else None
        self.unit_chars = self.unit_tokens = 0  # of the counted units: what a guess of unseen ones scales by
        self._last: tuple[str, list[int]] | None = None

    def ids(self, text: str) -> list[int]:
        """The prompt's ids as the model receives them (special tokens added)."""
        if self._last is None or self._last[0] != text:
            self._last = (text, self.tokenizer.encode(text, add_special_tokens=True))
        return self._last[1]

    def count(self, text: str) -> int:
        """RULER's count: the text's tokens without special tokens (ruler.md section 5). The
        tokens a tokenizer adds do not depend on the text (the budget assumes it too)."""
        return len(self.ids(text)) - self.specials

    def split(self, text: str) -> list[str]:
        """The text's units (their digits read as 0 where the count does not depend on them:
        the fold maps digits to digits, so the cuts stay where they were)."""
        if self.fold is not None:
            text = text.encode(errors="surrogatepass").translate(self.fold).decode(errors="surrogatepass")
        return UNIT_CUT.split(text)

    def estimate(self, text: str) -> int:
        """The sum of the text's unit counts (the unseen ones counted in one call)."""
        return self._estimate(self.split(text))

    def _estimate(self, units: list[str]) -> int:
        known = self.units
        self._count_units([u for u in units if u not in known])
        return sum(map(known.__getitem__, units))

    def over(self, text: str, limit: int) -> bool | None:
        """Whether the text's estimate is above `limit`, None when finding out would cost much:
        when units not counted yet make up more than CHEAP of the text (a sample's fresh
        draws). Unseen units are counted (one call) only when, guessed at twice the tokens per
        character of the counted ones, they could take the estimate above the limit."""
        units = self.split(text)
        known = self.units
        unseen = [u for u in units if u not in known]
        if sum(map(len, set(unseen))) > CHEAP * len(text):
            return None
        per_char = 2 * self.unit_tokens / max(1, self.unit_chars)
        if sum(map(known.get, units, repeat(0))) + per_char * sum(map(len, unseen)) <= limit:
            return False
        self._count_units(unseen)
        return sum(map(known.__getitem__, units)) > limit

    def _count_units(self, units: list[str]) -> None:
        unseen = list(dict.fromkeys(units))
        if unseen:
            for unit, ids in zip(unseen, encode_batch(self.tokenizer, unseen, False), strict=True):
                self.units[unit] = len(ids)
                self.unit_chars += len(unit)
                self.unit_tokens += len(ids)


class Sizer:
    """Fit decisions of a stream's searches: on counts, confirmed by real encodes near the
    limit (see the module's docstring), or with `exact` every probe encoded (NVIDIA's way:
    the fallback when the estimates prove unreliable, and the reference the tests compare with)."""

    def __init__(self, counts: TokenCounts, exact: bool = False) -> None:
        self.counts, self.exact = counts, exact
        self.cheap_samples = not exact  # until a sample's fresh draws make its estimate dear
        self.tries = self.too_long = 0  # sample tries, and those over the limit
        self.compared = self.worst_miss = 0  # whole texts whose estimate met their encode, the largest miss

    @staticmethod
    def margin(limit: int) -> int:
        """How far from the limit an estimate must be to decide alone: far more than the few
        tokens the cuts can miss by where they hold (none, on SmolLM2's BPE)."""
        return max(32, limit // 1024)

    def real(self, text: str, estimate: int | None, limit: int) -> int:
        """The real count, checked against the estimate when there is one."""
        count = self.counts.count(text)
        if estimate is not None:
            self.compare(estimate, count, limit)
        return count

    def compare(self, estimate: int, count: int, limit: int) -> None:
        """A whole text's estimate beside its encode: Unreliable past a quarter of the margin."""
        miss = abs(count - estimate)
        if miss > self.margin(limit) // 4:
            raise Unreliable(f"estimated {estimate} tokens, counted {count}")
        self.compared += 1
        self.worst_miss = max(self.worst_miss, miss)

    def slack(self, limit: int) -> int:
        """How far over the limit an estimate must be to turn a text down without its encode: a
        quarter of the margin (what `compare` lets an estimate miss by), or none once EXACT_AFTER
        whole texts' estimates have equalled their encodes (the cuts hold for this tokenizer on
        this stream's texts: a miss would need a kind of unit none of them held)."""
        return 0 if self.compared >= EXACT_AFTER and self.worst_miss == 0 else self.margin(limit) // 4

    def fits(self, text: str, limit: int) -> tuple[bool, bool]:
        """(whether the text has at most `limit` tokens, whether a real encode said so)."""
        if self.exact:
            return self.counts.count(text) <= limit, True
        estimate = self.counts.estimate(text)
        if abs(estimate - limit) > self.margin(limit):
            return estimate < limit, False
        return self.real(text, estimate, limit) <= limit, True

    def sample_fits(self, text: str, limit: int, on_encode: bool = False) -> bool:
        """A sample's fit test: its encode decides (the request needs the ids anyway), except
        that a try whose units are nearly all counted already and whose estimate is over the
        limit by more than the `slack` is turned down on counts (a retry at a smaller size follows).
        Estimating stops once tries prove to fit nearly always (it would only add calls);
        `on_encode`: the encode decides alone (the caller knows an estimate would not help)."""
        self.tries += 1
        if not on_encode and self.cheap_samples and (self.tries <= TRIAL_TRIES or self.too_long * TRIAL_TRIES >= self.tries):
            over = self.counts.over(text, limit + self.slack(limit))
            self.cheap_samples = over is not None
            if over:
                self.too_long += 1
                return False
        fits = self.counts.count(text) <= limit
        self.too_long += not fits
        return fits

    def value(self, text: str, limit: int, of_count: Callable[[int], int]) -> int:
        """`of_count(tokens of text)` for a function that never grows with the count (a search's
        upper bound): taken on the estimate when the margin around it gives one answer."""
        if not self.exact:
            estimate, margin = self.counts.estimate(text), self.margin(limit)
            if estimate > margin and of_count(estimate - margin) == of_count(estimate + margin):
                return of_count(estimate)
        return of_count(self.real(text, None, limit))


class Probes:
    """One search's probes: each decided by the sizer, the texts decided on estimates kept
    so the probes that bracket the answer can be confirmed by real encodes."""

    def __init__(self, sizer: Sizer, limit: int) -> None:
        self.sizer, self.limit = sizer, limit
        self.on_estimate: dict[int, tuple[str, bool]] = {}

    def fits(self, size: int, text: str) -> bool:
        ok, real = self.sizer.fits(text, self.limit)
        if not real:
            self.on_estimate[size] = (text, ok)
        return ok

    def confirm(self, *sizes: int) -> None:
        """Real encodes of these probes (if decided on estimates) must agree with the decisions."""
        for size in sizes:
            if size in self.on_estimate:
                text, ok = self.on_estimate.pop(size)
                estimate = self.sizer.counts.estimate(text)
                if (self.sizer.real(text, estimate, self.limit) <= self.limit) != ok:
                    raise Unreliable(f"the probe of size {size} was decided wrongly on its estimate")
