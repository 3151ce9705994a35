"""The ETA on a synthetic clock (`JobProgress(clock=)`, the estimate `lctx eval` and jobs share):
a run shaped like the real model's on the CPU (short prompts read fast, long ones slower, a
batch decoding slowly after every prompt is read, the samples finishing together at the end)
keeps its ETA within 2x of the time really left; counting samples, or prompt tokens as equal
shares of the work, did not (55 s said with 168 s left, bench/results/eta_accuracy.md)."""

from __future__ import annotations

import math

from evaluators.eta import GENERATED_COST, Eta
from evaluators.progress import JobProgress

LENGTHS = [1000, 2000, 4000, 8000]
PASSKEY = {"name": "passkey", "lengths": LENGTHS, "trials": 2, "max_new_tokens": 10}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def real_shaped_run(progress: JobProgress, clock: Clock, beat: float = 0.5) -> list[tuple[float, float | None]]:
    """Prompts shortest first, each told a thirtieth at a time, a token at position p taking
    (1 + p / 3000) x 4 ms (attention grows with the prompt); then 8 rows decoding 9 steps of 4 s
    (a generated token ~60 prompt tokens' time, as on the real model; 9 of the 10 tokens budgeted, as the real run
    generated 18 of 20); the samples all finish after the last step.
    The ETA every `beat` seconds (the heartbeat) as (time, eta)."""
    events: list[tuple[float, str, int]] = []  # (time, kind, amount)
    t = 0.0
    for length in sorted(LENGTHS * 2):
        part = length // 30
        for i in range(30):
            t += sum(0.004 * (1 + p / 3000) for p in range(i * part, (i + 1) * part, 50)) * 50
            events.append((t, "tokens", part))
    for _ in range(9):
        t += 4.0
        events.append((t, "generated", 8))
    events.append((t, "done", 8))
    seen: list[tuple[float, float | None]] = []
    tokens = generated = 0
    progress.set("passkey", done=0, total=8)
    now = 0.0
    for when, kind, amount in events:
        while now + beat < when:
            now += beat
            clock.now = now
            progress.tick()
            seen.append((now, progress.snapshot()["passkey"]["eta_s"]))
        clock.now = when
        if kind == "tokens":
            tokens += amount
            progress.set("passkey", tokens=tokens)
        elif kind == "generated":
            generated += amount
            progress.set("passkey", generated=generated)
        else:
            progress.set("passkey", done=amount)
    return [(when, eta) for when, eta in seen if when < events[-1][0]] + [(events[-1][0], None)]


def test_the_eta_holds_within_2x_over_a_real_shaped_run() -> None:
    clock = Clock()
    progress = JobProgress(lambda state: None, {"passkey": PASSKEY}, every=0, clock=clock)
    seen = real_shaped_run(progress, clock)
    end = seen[-1][0]
    judged = [(end - when) / eta if eta else None for when, eta in seen[:-1] if when >= 0.1 * end]
    within = [r for r in judged if r is not None and 0.5 <= r <= 2.0]
    assert len(within) >= 0.9 * len(judged), sorted(r or 0 for r in judged)[:: max(1, len(judged) // 20)]
    assert progress.snapshot()["passkey"]["eta_s"] == 0.0  # every sample done


def test_the_decoding_left_after_every_prompt_is_read_is_counted() -> None:
    """Every prompt read, the batch decoding: the ETA is the generated tokens left at the time a
    generated token took (the old estimate said 0.1 s: its planned prompt tokens were read)."""
    clock = Clock()
    progress = JobProgress(lambda state: None, {"passkey": {**PASSKEY, "lengths": [1000], "trials": 2}},
                           every=0, clock=clock)
    progress.set("passkey", done=0, total=2)
    clock.now = 10.0
    progress.set("passkey", tokens=2000)  # 5 ms a prompt token
    before = progress.snapshot()["passkey"]["eta_s"]
    assert before == round(20 * GENERATED_COST * 10.0 / 2000, 1)  # the budget, at the cost assumed
    clock.now = 14.0
    progress.set("passkey", generated=4)  # 2 rows, 2 steps: 1 s a generated token
    assert progress.snapshot()["passkey"]["eta_s"] == 16.0  # 16 of the 20 budgeted tokens left
    clock.now = 20.0  # a step in hand for 6 s: the estimate grows as it lasts
    progress.tick()
    # 6 s in hand against the 11.5 s the work so far took (faded: the recent part weighs most)
    assert progress.snapshot()["passkey"]["eta_s"] == round(16.0 * (1 + 6 / (10 * math.exp(-4 / 14) + 4)), 1)


def test_a_burst_of_reports_weighs_the_time_it_took_not_its_count() -> None:
    """Reported work costs the time since the report before: a thousand tokens told in ten
    reports a millisecond apart after 10 s took 10 s."""
    eta = Eta(prompt_tokens=4000, generated_tokens=0, samples=4, done=0, tokens=0, generated=0, start=0.0)
    for i in range(10):
        eta.observe(10.0 + i / 1000, 100 * (i + 1), 0)
    assert eta.seconds_left(10.01, 0, 4, 1000, 0) == 30.0


def test_a_resumed_run_counts_only_its_own_work() -> None:
    """A job's second attempt: its feed's first reading holds the earlier attempt's tokens and
    samples; the speed and the work left are this run's."""
    clock = Clock()
    progress = JobProgress(lambda state: None, {"passkey": {**PASSKEY, "lengths": [1000], "trials": 4}},
                           previous={"passkey": {"done": 2, "total": 4}}, every=0, clock=clock)
    progress.set("passkey", done=2, total=4, tokens=2500)  # 2 samples and a partial prompt before this run
    clock.now = 5.0
    progress.set("passkey", tokens=3500)  # 1000 of this run's 2000 in 5 s
    cell = progress.snapshot()["passkey"]
    assert cell["tokens_per_s"] == 200.0
    assert cell["eta_s"] == round(5.0 + 20 * GENERATED_COST * 5.0 / 1000, 1)


def test_without_tokens_the_samples_say_it() -> None:
    """A served model reports no tokens: the time per sample of this run."""
    eta = Eta(prompt_tokens=None, generated_tokens=None, samples=10, done=0, tokens=0, generated=0, start=0.0)
    assert eta.seconds_left(3.0, 0, 10, 0, 0) is None  # measuring
    assert eta.seconds_left(4.0, 2, 10, 0, 0) == 16.0
    assert eta.seconds_left(9.0, 10, 10, 0, 0) == 0.0
