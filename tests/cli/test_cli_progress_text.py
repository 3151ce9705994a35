"""How progress reads: `lctx submit --wait`'s line and `lctx eval`'s bars (cli/client_commands.py,
cli/evaluate.py), and the results' number format (evaluators/results.fmt)."""

from __future__ import annotations

from types import SimpleNamespace

from cli.client_commands import progress_line
from cli.evaluate import eval_postfix
from evaluators.progress import tokens_text
from evaluators.results import fmt


def cell(**fields: object) -> dict:
    return {"done": 0, "total": 2, "tokens": 0, "planned_tokens": 2000, "tokens_per_s": None, "eta_s": None, **fields}


def test_a_finished_task_shows_the_tokens_reached_not_the_plan() -> None:
    assert tokens_text(1, 2, 1711, 2000, 850.4) == "1,711/2,000 tokens prefilled (850 tok/s)"
    assert tokens_text(2, 2, 1711, 2000, 850.4) == "1,711 tokens prefilled (850 tok/s)"
    assert tokens_text(1, 2, 2100, 2000, None) == "2,100 tokens prefilled"  # past the estimate
    assert eval_postfix(cell(done=2, tokens=1711, tokens_per_s=900.0)) == "1,711 tokens prefilled (900 tok/s)"


def test_eval_shows_prefill_and_an_eta_before_the_first_sample() -> None:
    assert eval_postfix(cell(tokens=512, tokens_per_s=256.0, eta_s=6.2)) == \
        "512/2,000 tokens prefilled (256 tok/s), ETA 6 s"
    assert eval_postfix(cell()) == "ETA: measuring"
    assert eval_postfix(cell(tokens=10, eta_s=0.2)).endswith("ETA 1 s")  # never 0 s while running


def test_a_running_job_never_shows_eta_0_s() -> None:
    task = SimpleNamespace(done=1, total=2, tokens=2000, planned_tokens=2000, tokens_per_s=500.0, eta_s=0.0)
    job = SimpleNamespace(status="running", progress={"passkey": task})
    assert progress_line(job).endswith("; ETA: measuring")
    task.eta_s = 0.3
    assert progress_line(job).endswith("; ETA 1 s")
    job.status, task.done = "succeeded", 2
    assert progress_line(job) == "succeeded: passkey 2/2, 2,000 tokens prefilled (500 tok/s)"


def test_integers_print_as_integers() -> None:
    assert fmt(1000.0, unit="tokens") == "1000" and fmt(256.0, unit="tokens") == "256"
    assert fmt(1000.0) == "1000" and fmt(1234.56) == "1235"  # never 1e+03
    assert fmt(0.5) == "0.500" and fmt(0.5, 2) == "0.50" and fmt(None) == "-"
    assert fmt(1.0) == "1.000"  # a fraction stays a fraction
