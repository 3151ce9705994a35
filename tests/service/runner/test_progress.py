"""JobProgress: every task's planned total from the start, the last update of a burst
written by its timer, tokens prefilled, the prefill speed and an ETA from it."""

from __future__ import annotations

import time

from evaluators.eta import GENERATED_COST
from evaluators.progress import JobProgress

PASSKEY = {"name": "passkey", "lengths": [1000, 2000], "trials": 3}
NEEDLE = {"name": "needle", "lengths": [1000], "depths": [0, 50], "trials": 1}


def test_every_task_has_its_planned_total_before_it_starts() -> None:
    writes: list[dict] = []
    progress = JobProgress(writes.append, {"passkey": PASSKEY, "needle": NEEDLE}, every=10)
    progress.flush()
    assert {k: (v["done"], v["total"], v["planned_tokens"]) for k, v in writes[-1].items()} == \
        {"passkey": (0, 6, 9000), "needle": (0, 2, 2000)}


def test_the_last_update_of_a_burst_is_written_and_the_eta_comes_from_tokens() -> None:
    writes: list[dict] = []
    progress = JobProgress(writes.append, {"passkey": PASSKEY}, every=0.3)
    samples, prefilled = progress.samples("passkey"), progress.prefilled("passkey")
    samples("passkey", 0, 6)
    for _ in range(3):  # a burst of prefill chunks, no sample done yet
        time.sleep(0.05)
        prefilled(500)
    assert writes[-1]["passkey"]["tokens"] < 1500  # throttled ...
    time.sleep(0.6)
    last = writes[-1]["passkey"]
    assert last["tokens"] == 1500 and last["done"] == 0  # ... and written when the burst ended
    assert last["tokens_per_s"] > 0 and 0 < last["eta_s"] < 60  # 1500 of 9000 tokens in ~0.15 s
    prefilled(7500)
    samples("passkey", 6, 6)
    progress.close()
    assert writes[-1]["passkey"]["done"] == 6 and writes[-1]["passkey"]["eta_s"] == 0.0


def test_a_resumed_task_counts_the_samples_of_the_earlier_run() -> None:
    writes: list[dict] = []
    progress = JobProgress(writes.append, {"passkey": PASSKEY}, previous={"passkey": {"done": 3, "total": 6}},
                           every=0)
    progress.samples("passkey")("passkey", 3, 6)
    time.sleep(0.1)
    progress.prefilled("passkey")(2250)  # half of the 4500 tokens left
    eta = writes[-1]["passkey"]["eta_s"]
    assert eta is not None and 0.05 < eta < 1.0  # as long again as the time spent so far


def test_no_eta_of_0_s_while_samples_remain_once_the_planned_tokens_are_read() -> None:
    """Planned tokens are an estimate (a prefix cache, a tokenizer, answers that stop early):
    once the prompt tokens are read, the answers' budgets say what is left; once those are
    spent too with samples left, the ETA comes from samples, or is unknown until one finishes;
    never 0 s."""
    writes: list[dict] = []
    now = [0.0]
    progress = JobProgress(writes.append, {"passkey": PASSKEY}, every=0, clock=lambda: now[0])
    progress.samples("passkey")("passkey", 0, 6)
    now[0] = 9.0
    progress.prefilled("passkey")(9000)  # every planned prompt token read, no token generated
    # 6 x 10 budgeted, each GENERATED_COST prompt tokens of 1 ms
    assert writes[-1]["passkey"]["eta_s"] == round(60 * GENERATED_COST / 1000, 1)
    now[0] = 10.0
    progress.generated("passkey")(60)  # every budgeted token generated, no sample recorded
    assert writes[-1]["passkey"]["eta_s"] is None
    now[0] = 12.0
    progress.samples("passkey")("passkey", 3, 6)
    assert writes[-1]["passkey"]["eta_s"] == 12.0  # half the samples: as long again, never 0
    progress.samples("passkey")("passkey", 6, 6)
    assert writes[-1]["passkey"]["eta_s"] == 0.0


def test_the_feed_reads_generated_tokens_from_the_unit_notes_and_this_run_counts_only_its_own(tmp_path) -> None:
    """A job's feed sums the unit runs' notes (tokens prefilled and generated); notes of an
    earlier attempt, read at the first refresh, are not this run's work."""
    from service.runner.progress import ProgressFeed, UnitNote, write_note

    now = [0.0]
    writes: list[dict] = []
    progress = JobProgress(writes.append, {"passkey": PASSKEY}, every=0, clock=lambda: now[0])
    feed = ProgressFeed(progress, {"passkey": tmp_path})
    earlier = UnitNote(lambda state: write_note(tmp_path, "u0-old", state), "u0", every=0)
    earlier.prefilled(3000)
    earlier.generated(10)
    feed.refresh()
    assert (writes[-1]["passkey"]["tokens"], writes[-1]["passkey"]["generated"]) == (3000, 10)
    note = UnitNote(lambda state: write_note(tmp_path, "u0-new", state), "u0", every=0)
    now[0] = 9.0
    note.prefilled(9000)  # this run's 9,000 of the 9,000 planned in 9 s; 60 tokens budgeted left
    feed.refresh()
    cell = writes[-1]["passkey"]
    assert cell["tokens"] == 12000 and cell["tokens_per_s"] == 1000.0
    # 60 tokens at GENERATED_COST prompt tokens' time: nothing of the earlier attempt's
    assert cell["eta_s"] == round(60 * GENERATED_COST / 1000, 1)
    now[0] = 10.0
    note.generated(20)
    feed.refresh()
    assert writes[-1]["passkey"]["generated"] == 30 and writes[-1]["passkey"]["eta_s"] == 2.0  # 40 left, 50 ms each


def test_the_feed_reads_prompt_tokens_the_prefix_cache_served_and_should_serve(tmp_path) -> None:
    """A unit run's note counts the tokens its prefix cache served as prefilled and apart, and
    those it should still serve while it runs; the job's ETA charges the first no time and leaves
    the second out of what is left to read (0 once the run ended)."""
    from service.runner.progress import ProgressFeed, UnitNote, write_note

    now = [0.0]
    writes: list[dict] = []
    progress = JobProgress(writes.append, {"passkey": PASSKEY}, every=0, clock=lambda: now[0])
    feed = ProgressFeed(progress, {"passkey": tmp_path})
    feed.refresh()
    note = UnitNote(lambda state: write_note(tmp_path, "u0-new", state), "u0", every=0)
    note.foreseen(4000)  # the call's start: 4,000 of the 9,000 planned prompt tokens should be served
    now[0] = 2.0
    note.prefilled(2000)  # 1 ms a prompt token
    feed.refresh()
    per_generated = GENERATED_COST / 1000
    assert writes[-1]["passkey"]["eta_s"] == round(3000 / 1000 + 60 * per_generated, 1)
    now[0] = 3.0
    note.reused(4000)  # served as its row was admitted, a second after the last report
    feed.refresh()
    cell = writes[-1]["passkey"]
    assert cell["tokens"] == 6000 and cell["tokens_per_s"] == round(2000 / 3.0, 1)
    assert cell["eta_s"] == round(3000 / 1000 * (1 + 1 / 2) + 60 * per_generated * (1 + 1 / 2), 1)  # the stall counts
    note.write(samples=0, foreseen=0)
    note.state["foreseen"] = 100  # a finished run's forecast (an old note) is not counted
    write_note(tmp_path, "u0-new", note.state)
    feed.refresh()
    assert progress.reuse["passkey"] == [4000, 0]
