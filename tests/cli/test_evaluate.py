"""`lctx eval`, `lctx score longbench|scrolls` and `lctx lm-eval` through the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import evaluate
from cli.main import main
from evaluators.suite import RESULTS_FILE
from tests.helpers import points, tiny_model, write_tasks

DATA = Path(__file__).parents[1] / "evaluators" / "data"


def test_eval_passkey_writes_results_and_resumes(tmp_path: Path, capsys) -> None:
    tiny_model(tmp_path / "m")
    argv = ["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--lengths", "260,300",
            "--trials", "2", "--out", str(tmp_path / "out"), "-q"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "accuracy @ length 260 (n=2)" in printed and "accuracy (fraction, n=4)" in printed
    assert "passkey: passkey accuracy" in printed  # the result's summary line
    doc = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())
    assert points(doc["results"]["passkey"], "accuracy", "length")[300].n == 2
    assert doc["model"]["backend"] == "auto" and doc["model"]["resolved_backend"] == "torch"
    assert doc["versions"]["lctx"]
    samples = tmp_path / "out" / "passkey" / "samples.jsonl"
    assert len(samples.read_text().splitlines()) == 4
    assert main(argv) == 0  # everything recorded: nothing runs twice
    assert len(samples.read_text().splitlines()) == 4



def test_eval_warns_of_data_from_before_a_benchmarks_fix(tmp_path: Path, capsys) -> None:
    """Graphwalks files in the wording before the 2026-02-27 fix: `lctx eval` warns before it
    loads the model (the submission's check) and after the run (what the run found: the parents
    row whose truth holds its node too), and runs all the same; results.json records both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tiny_model(tmp_path / "m")
    (tmp_path / "data" / "graphwalks").mkdir(parents=True)
    rows = [{"prompt": "a -> b\nOperation:\nPerform a BFS from node a with depth 1.", "answer_nodes": ["b"]},
            {"prompt": "b -> b\nOperation:\nFind the parents of node b.", "answer_nodes": ["b"]}]
    pq.write_table(pa.Table.from_pylist([{**r, "problem_type": t, "prompt_chars": len(r["prompt"])}
                                         for r, t in zip(rows, ("bfs", "parents"), strict=True)]),
                   tmp_path / "data" / "graphwalks" / "graphwalks_128k_and_shorter.parquet")
    argv = ["eval", "--checkpoint", str(tmp_path / "m"), "--task", "graphwalks", "--sets", "128k_and_shorter",
            "--max-new-tokens", "2", "--option", "chat_template=false", "--data-dir", str(tmp_path / "data"),
            "--out", str(tmp_path / "out"), "-q"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "warning: graphwalks: graphwalks_128k_and_shorter.parquet: its bfs prompts ask for the nodes at " \
           "\"depth N\" without \"exactly\"" in printed.err
    after = [line for line in printed.out.splitlines() if line.startswith("warning: graphwalks: ")]
    assert len(after) == 2 and "1 of 1 bfs prompts" in after[0] and "1 parents rows have the node" in after[1]
    entry = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())["results"]["graphwalks"]
    assert entry["data"]["warnings"] == [line.removeprefix("warning: graphwalks: ") for line in after]


def test_eval_draft_tokens_sets_prompt_lookup(tmp_path: Path, capsys) -> None:
    """`--draft-tokens 0` turns prompt lookup off (no token drafted, the same answers); the
    default drafts on the PyTorch backend; a negative count is refused by the parser."""
    tiny_model(tmp_path / "m")
    argv = ["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--lengths", "260", "--trials", "3", "-q"]
    assert main([*argv, "--draft-tokens", "0", "--out", str(tmp_path / "off")]) == 0
    assert main([*argv, "--out", str(tmp_path / "on")]) == 0
    off, on = (json.loads((tmp_path / out / RESULTS_FILE).read_text())["results"]["passkey"]["seconds"]
               for out in ("off", "on"))
    assert off["drafted_tokens"] == off["kept_tokens"] == 0
    assert "drafted_tokens" in on and on["decode_steps"] <= off["decode_steps"]
    answers = [[json.loads(line)["prediction"] for line in (tmp_path / out / "passkey" / "samples.jsonl").open()]
               for out in ("off", "on")]
    assert answers[0] == answers[1]
    with pytest.raises(SystemExit):
        main([*argv, "--draft-tokens", "-1", "--out", str(tmp_path / "bad")])
    assert "--draft-tokens: must be >= 0, got -1" in capsys.readouterr().err


def test_eval_keys_a_repeated_task_as_the_worker_does(tmp_path: Path) -> None:
    from evaluators.suite import TASK_RESULT, task_keys

    tiny_model(tmp_path / "m")
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--task", "passkey",
                 "--lengths", "260", "--trials", "1", "--out", str(tmp_path / "out"), "-q"]) == 0
    doc = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())
    assert list(doc["results"]) == task_keys(doc["tasks"]) == ["passkey", "passkey#2"]  # one rule: run_suite's
    assert all((tmp_path / "out" / folder / TASK_RESULT).is_file() for folder in ("passkey", "passkey-2"))

def test_eval_output_folder_belongs_to_one_checkpoint(tmp_path: Path, capsys) -> None:
    tiny_model(tmp_path / "a", seed=0)
    tiny_model(tmp_path / "b", seed=1)
    argv = ["--task", "passkey", "--lengths", "260", "--trials", "1", "--out", str(tmp_path / "out"), "-q"]
    assert main(["eval", "--checkpoint", str(tmp_path / "a"), *argv]) == 0
    assert main(["eval", "--checkpoint", str(tmp_path / "b"), *argv]) == 2
    assert "another checkpoint" in capsys.readouterr().err


def test_eval_longbench_and_scrolls_from_a_data_dir(tmp_path: Path) -> None:
    tiny_model(tmp_path / "m")
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "longbench", "--datasets", "passage_count",
                 "--max-length", "200", "--data-dir", str(DATA / "longbench"), "--out", str(tmp_path / "o1"),
                 "-q"]) == 0
    doc = json.loads((tmp_path / "o1" / RESULTS_FILE).read_text())
    assert points(doc["results"]["longbench"], "score", "dataset")["passage_count"].n == 1
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "scrolls", "--datasets", "quality",
                 "--max-length", "200", "--option", "max_new_tokens=4", "--data-dir", str(DATA / "scrolls"),
                 "--out", str(tmp_path / "o2"), "-q"]) == 0
    doc = json.loads((tmp_path / "o2" / RESULTS_FILE).read_text())
    assert set(points(doc["results"]["scrolls"], "score", "dataset")) == {"quality"}


def test_eval_refuses_bad_options(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may land in the default ./lctx-eval of the repository
    tiny_model(tmp_path / "m")
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--datasets", "x"]) == 2
    assert "--datasets applies to none of the tasks passkey; they accept" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--task", "needle",
                 "--split", "test"]) == 2
    assert "applies to none of the tasks" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkee"]) == 2
    assert "unknown task" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "m"), "--task", "longbench", "--datasets", "trec",
                 "--data-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "trec.jsonl" in capsys.readouterr().err


def test_eval_refuses_files_that_hold_no_text_before_loading(tmp_path: Path, capsys, monkeypatch) -> None:
    """An empty haystack, a blank or empty text folder, an empty benchmark file: refused saying
    which and what to do, before the checkpoint is read (there is none here to read)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("\n \n")
    (tmp_path / "passage_count.jsonl").write_text(" ")
    missing = str(tmp_path / "no-model")
    cases = [
        (["--task", "needle", "--haystack-file", "empty.txt"], "needle: haystack_file: empty.txt: it is empty"),
        (["--task", "perplexity", "--text-file", "docs", "--lengths", "16", "--max-tokens", "32"],
         "perplexity: text_file: docs has only .txt files with no text"),
        (["--task", "longbench", "--datasets", "passage_count", "--data-dir", str(tmp_path)],
         "data files that hold nothing"),
    ]
    for argv, why in cases:
        assert main(["eval", "--checkpoint", missing, *argv]) == 2
        assert why in capsys.readouterr().err, argv
    assert not (tmp_path / "lctx-eval").exists()


def test_score_longbench_writes_official_result(tmp_path: Path, capsys) -> None:
    pred = tmp_path / "pred"
    pred.mkdir()
    rows = [{"pred": "\nCity\nCountry", "answers": ["City"], "all_classes": ["City", "Country"], "length": 10},
            {"pred": "Country", "answers": ["City"], "all_classes": ["City", "Country"], "length": 10}]
    (pred / "trec.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["score", "longbench", "--pred-dir", str(pred)]) == 0
    assert json.loads((pred / "result.json").read_text()) == {"trec": 50.0}
    assert main(["score", "longbench", "--pred-dir", str(pred), "--e"]) == 0
    assert json.loads((pred / "result.json").read_text()) == {"trec": {"0-4k": 50.0, "4-8k": None, "8k+": None}}


def test_score_scrolls(tmp_path: Path, capsys) -> None:
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"u1": "three"}))  # SCROLLS QuALITY outputs are the choice text
    assert main(["score", "scrolls", "--task", "quality", "--predictions", str(preds), "--data-dir",
                 str(DATA / "scrolls"), "--out", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["exact_match"] == 100.0


@pytest.mark.integration
def test_lm_eval_command_writes_lm_eval_layout(tmp_path: Path) -> None:
    tiny_model(tmp_path / "m")
    tasks = write_tasks(tmp_path / "tasks")
    out = subprocess.run([sys.executable, "-m", "cli.main", "lm-eval", "--checkpoint", str(tmp_path / "m"),
                          "--tasks", "lctx_toy_mc", "--limit", "2", "--include-path", str(tasks),
                          "--output-path", str(tmp_path / "res")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    files = list((tmp_path / "res").rglob("results_*.json"))
    assert len(files) == 1
    results = json.loads(files[0].read_text())
    assert "acc,none" in results["results"]["lctx_toy_mc"] and results["config"]["model"] == "lctx"


def test_eval_bars_show_prefill_then_the_totals_reached(tmp_path: Path, capsys, monkeypatch) -> None:
    """The bar says tokens prefilled, their speed and an ETA (no tqdm `?sample/s`), and its last
    line shows the tokens reached, not a share of the plan. Every report is drawn (no
    throttle): on a fast machine the whole run fits in one throttle interval."""
    monkeypatch.setattr(evaluate, "BAR_EVERY_S", 0.0)
    tiny_model(tmp_path / "m")
    argv = ["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--lengths", "260",
            "--trials", "2", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    bars = capsys.readouterr().err.replace("\r", "\n").splitlines()
    lines = [line for line in bars if line.startswith("passkey:")]
    assert lines and "?sample/s" not in "".join(lines) and "ETA 0 s" not in "".join(lines)
    assert lines[-1].startswith("passkey: 2/2 samples") and "tokens prefilled" in lines[-1]
    assert re.search(r"\] ?, [\d,]+ tokens prefilled \(", lines[-1])  # the tokens reached, no planned total
    assert re.search(r"[\d,]+/[\d,]+ tokens prefilled", "\n".join(lines[:-1]))  # a share of the plan before


@pytest.mark.integration  # a fresh interpreter (torch imported) runs a model: seconds
def test_eval_runs_and_shows_progress_without_the_service(tmp_path: Path) -> None:
    """`lctx eval` opens the model (checkpoints.opening), runs the tasks and prints its bars
    (evaluators.progress) without entering service/: in a fresh interpreter, the run loads
    no module of it beyond those the `lctx` parser itself holds (its error types, the client
    commands' flags)."""
    tiny_model(tmp_path / "m")
    probe = ("import json, sys\nfrom cli.main import build_parser, main\n"
             "service = lambda: {m for m in sys.modules if m.split('.')[0] == 'service'}\n"
             "build_parser()\nbefore = service()\n"
             "rc = main(json.loads(sys.argv[1]))\n"
             "print(json.dumps({'rc': rc, 'service': sorted(service() - before)}))")
    argv = ["eval", "--checkpoint", str(tmp_path / "m"), "--task", "passkey", "--lengths", "260", "--trials", "1",
            "--out", str(tmp_path / "out")]
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(argv)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"rc": 0, "service": []}, out.stderr[-2000:]
    assert "passkey" in out.stderr  # its progress bar
