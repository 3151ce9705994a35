"""Every command and flag of `lctx` says what it is for; `lctx serve`'s setting flags reach the
environment its dispatcher and workers read; `lctx leaderboard` fits a terminal by default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli.client_commands import column_header, fitting_columns
from cli.main import build_parser
from cli.server import SETTING_FLAGS, apply_setting_flags


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[str]:
    missing = [] if parser.description or not path else [f"lctx {' '.join(path)}: no description"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _walk(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"lctx {' '.join(path)} {'/'.join(action.option_strings) or action.dest}: no help")
    return missing


def test_every_command_has_a_description_and_every_argument_help() -> None:
    assert _walk(build_parser(), ()) == []


def test_schedules_have_add_list_run_and_remove(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["schedules", "--help"])
    out = capsys.readouterr().out
    assert all(action in out for action in ("add", "list", "run", "remove"))
    args = build_parser().parse_args(["schedules", "add", "nightly", "--watch", "runs", "--task", "passkey",
                                      "--rope", "yarn:4"])
    assert (args.name, args.cron, args.watch, args.rope) == ("nightly", "0 2 * * *", ["runs"], "yarn:4")


def test_serve_flags_set_the_variables_every_process_of_the_service_reads(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path / "data"), "--checkpoint-root", "a",
                                      "--checkpoint-root", "b", "--max-job-seconds", "60"])
    environ: dict[str, str] = {}
    apply_setting_flags(args, environ)
    assert environ == {"LCTX_DATA_DIR": str(tmp_path / "data"), "LCTX_CHECKPOINT_ROOTS": "a,b",
                       "LCTX_MAX_JOB_SECONDS": "60.0"}
    from service.core.settings import Settings

    for variable in SETTING_FLAGS.values():
        assert variable.startswith("LCTX_")
        field = variable.removeprefix("LCTX_").lower()
        assert field in Settings.model_fields, f"{variable} is not a setting"


def test_serve_data_dir_reaches_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.core.settings import Settings

    monkeypatch.delenv("LCTX_DATA_DIR", raising=False)
    args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path)])
    apply_setting_flags(args)  # the process environment, as `lctx serve` does it
    assert Settings().data_dir == tmp_path


def _board(columns: list[str], headline: str) -> dict:
    return {"columns": columns, "headline": headline,
            "rows": [{"checkpoint": "smollm2-135m", "setting": "rope yarn:4 · auto"}]}


def test_leaderboard_fits_120_columns_headline_and_lengths_first() -> None:
    depth = [f"accuracy.depth={d / 10:.1f}" for d in range(10)]
    lengths = [f"accuracy.length={n}" for n in (256, 512, 1024, 2048)]
    board = _board(["accuracy", *depth, *lengths], "accuracy")
    shown = fitting_columns(board, 120)
    assert shown[0] == "accuracy" and all(c in shown for c in lengths)
    assert len(shown) < len(board["columns"])
    assert column_header("accuracy.length=256", "accuracy") == "length=256"
    width = len("smollm2-135m") + 2 + len("rope yarn:4 · auto") + sum(
        2 + max(len(column_header(c, "accuracy")), 7) for c in shown)
    assert width <= 120
    assert fitting_columns(board, 10_000) == board["columns"]  # room for all: the board's order kept


def test_operator_commands_take_the_setting_flags_serve_declares(tmp_path: Path) -> None:
    """`lctx backup/restore/prune` declare --home and --results-dir (and prune its retention
    flags) from the one table `lctx serve` reads: each sets the variable serve's does."""
    from cli.server import _FLAG_ARGUMENTS

    assert set(_FLAG_ARGUMENTS) == set(SETTING_FLAGS)
    for command in (["backup", "out"], ["restore", "out"], ["prune", "--retention-days", "30", "--retention-keep", "3"]):
        args = build_parser().parse_args([*command, "--home", str(tmp_path), "--results-dir", str(tmp_path / "r")])
        environ: dict[str, str] = {}
        apply_setting_flags(args, environ)
        expected = {"LCTX_HOME": str(tmp_path), "LCTX_RESULTS_DIR": str(tmp_path / "r")}
        if command[0] == "prune":
            expected |= {"LCTX_RETENTION_DAYS": "30.0", "LCTX_RETENTION_KEEP": "3"}
        assert environ == expected, command
