"""A task's seconds left, from the work its plan has left and the time each kind of work took
so far in this run (`lctx eval`'s bars and a job's progress: `evaluators.progress.JobProgress`).

Two kinds of work, measured apart because they cost very differently: prompt tokens prefilled
(reported a chunk's layer at a time) and tokens generated (reported after each decoding step;
on the CPU a generated token took the time of 1 to 60 prompt tokens, by the load and the batch:
bench/results/eta_accuracy.md). The time between two reports is the cost of the work the second
one reports (the engine reports work once it is done), and the time since the last report makes
every token dearer by its share of the time the work so far took, so a stall raises the estimate
as it lasts. Seconds left = seconds per prompt token so far x prompt tokens the plan has left +
seconds per generated token x generated tokens left (at most the budgets of the samples not
done). The seconds per token fade with a time constant of the run's elapsed time, so the recent
part weighs most: a machine whose load changed, prompts read faster later are followed, and one
slow moment does not rule a long run. Before a token is generated, a generated token is taken to
cost GENERATED_COST prompt tokens.

Counting prompt tokens alone, as equal shares of the work, said 55 s left of 168 s on the real
model, and 0.1 s through the last minute: a batch decodes after every prompt is read, for
minutes on the CPU, and its samples finish together at the end. Where no token is reported (a
served model, a task whose tokens its data decides) the samples say it: the time per sample of
this run times the samples left; where the planned tokens are all counted with samples left,
those samples say the rest. Prompt tokens the prefix cache serves are
counted as read but charged no time (`reused`: the engine reports them apart as a row is
admitted), and those it should serve in the engine's current call (`pending`: foreseen at the
call's start, less those served since) are not left to read: passkey's trials share their
haystacks, and the cache served half the prompt tokens, 5,548 at once at 77% of the run, which
an ETA blind to them put at twice the time left (bench/results/eta_accuracy.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Prompt tokens' time one generated token takes until a decoding step is measured. By FLOPs the
# two cost about the same (2 x parameters, plus attention over the context), but a decoding step
# is memory-bound: it reads every weight and every row's whole KV cache (46 KB a position for
# SmolLM2-135M in fp32: 1.4 GB a step for 8 rows at passkey's lengths) for a few tokens a row.
# Measured with the engine's batch of 8 on the CPU, a generated token against the run's mean
# prompt token read: 1.2, 11, 16, 24 and 35 in five runs (bench/results/eta_accuracy.md); 12
# is within 3x of four of them. The first step measured replaces it.
GENERATED_COST = 12.0
FADE = 1.0  # the seconds per token fade with this many run-lengths so far (1: the whole run)


@dataclass
class Eta:
    """One task run's estimate. `prompt_tokens` and `generated_tokens`: what its plan reads and
    may generate in all (None: not known before the data), `samples` its planned total;
    `done` (samples), `tokens` and `generated`: what was counted when this run started (a resumed
    task's earlier work is not this run's), `served` of those tokens by the prefix cache; `start`:
    its clock then."""

    prompt_tokens: int | None
    generated_tokens: int | None
    samples: int
    done: int
    tokens: int
    generated: int
    start: float
    served: int = 0

    def __post_init__(self) -> None:
        self.last = self.start  # the last report of work
        self.seen = [self.tokens, self.generated]  # tokens of each kind counted so far
        self.reused = self.served  # prompt tokens of `seen` the prefix cache served (charged no time)
        self.spent = [0.0, 0.0]  # seconds each kind took
        self.counted = [0.0, 0.0]  # tokens of each kind those seconds did (both fading alike)

    def observe(self, now: float, tokens: int, generated: int, reused: int = 0) -> None:
        """The tokens counted at `now`: the time since the last report is what they took (split
        by the current costs when both kinds moved at once: a job's feed reads them together).
        `reused`: how many of this run's `tokens` the prefix cache served; they took no time, so
        the time since the last report stays with the work still in hand."""
        served = max(0, reused - self.reused)
        moved = [max(0, tokens - self.seen[0] - served), max(0, generated - self.seen[1])]
        if served and not any(moved):
            self.seen[0], self.reused = self.seen[0] + served, reused
            return
        if not any(moved) or now <= self.last:
            return
        per = self.costs(self.last) or (1.0, GENERATED_COST)
        work = [moved[0] * per[0], moved[1] * per[1]]
        fade = math.exp(-FADE * (now - self.last) / (now - self.start))  # the run so far, its recent part weighing most
        for k in (0, 1):
            self.spent[k] = self.spent[k] * fade + (now - self.last) * work[k] / sum(work)
            self.counted[k] = self.counted[k] * fade + moved[k]
        self.seen, self.reused = [tokens, generated], reused
        self.last = now

    def costs(self, now: float) -> tuple[float, float] | None:
        """Seconds per prompt token and per generated token (None: no token counted yet)."""
        counted = self.counted
        if not any(counted):
            return None
        # the work in hand, not reported yet, against the time the work so far took: a stall as
        # long as a tenth of it makes every token a tenth dearer (put on one kind, a few tokens
        # of it would make it dear beyond reason)
        stretch = 1.0 + max(0.0, now - self.last) / max(1e-9, sum(self.spent))
        per = [self.spent[k] * stretch / counted[k] if counted[k] else None for k in (0, 1)]
        if per[1] is None:
            return per[0], per[0] * GENERATED_COST
        if per[0] is None:
            return per[1] / GENERATED_COST, per[1]
        return per[0], per[1]

    def seconds_left(self, now: float, done: int, total: int, tokens: int, generated: int,
                     pending: int = 0) -> float | None:
        """Seconds left (0.0 once every sample is done, never 0 while one remains; None while
        nothing this run did says how fast it goes). `pending`: prompt tokens the prefix cache
        should still serve (foreseen, not served yet): not left to read."""
        if total <= 0:
            return None
        if done >= total:
            return 0.0
        elapsed = now - self.start
        share = (total - self.done) / total  # the plan's part left to this run
        costs = self.costs(now)
        left = None
        if costs is not None and self.prompt_tokens is not None:
            prompt_left = max(0.0, self.prompt_tokens * share - (tokens - self.tokens) - pending)
            per_sample = (self.generated_tokens or 0) / max(1, self.samples)
            gen_left = max(0.0, min((self.generated_tokens or 0) * share - (generated - self.generated),
                                    per_sample * (total - done)))
            left = costs[0] * prompt_left + costs[1] * gen_left
            if left <= 0:
                left = None  # the plan's tokens are counted, samples remain: they say the rest
        if left is None and done > self.done and elapsed > 0:
            left = elapsed * (total - done) / (done - self.done)
        return None if left is None else max(0.1, round(left, 1))
