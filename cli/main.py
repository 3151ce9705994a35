"""`lctx` command line: one entry point; each command group lives in `cli/<group>.py`
and registers its subcommands here. Every error ends as one line on stderr,
`lctx: error: ...`, and a non-zero exit status (argparse's own usage errors read the same)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from checkpoints.errors import CheckpointError, EndpointUnavailable
from service.core.errors import ServiceError

# Command groups, in help order. A module missing here simply adds no commands.
COMMAND_MODULES = (
    "cli.runtime",
    "cli.evaluate",
    "cli.server",
    "cli.operate",
    "cli.client_commands",
    "cli.train",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lctx", description="Long-context evaluation for language models")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(sub)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand without a description its one-line help as one: `lctx schedules run
    --help` says what the command does, not only its usage."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if not sub.description and helps.get(name):
                sub.description = helps[name]
            _describe(sub)


def exit_status(error: BaseException) -> int:
    """1 when the API refused or could not be reached, 2 for a refused input (a checkpoint,
    a value), 1 for anything else."""
    from service.client import ApiError  # here, not at the top: `lctx --help` needs no httpx

    if isinstance(error, ApiError | EndpointUnavailable):  # a server that stayed down: not the input
        return 1
    if isinstance(error, CheckpointError | ValueError):
        return 2
    return 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("lctx: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lctx results --samples | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not complain
        return 0
    except Exception as e:
        if os.environ.get("LCTX_DEBUG"):
            raise
        from service.client import ApiError

        known = isinstance(e, ApiError | CheckpointError | ServiceError | ValueError | OSError)
        message = " ".join(str(e).split()) or type(e).__name__
        if not known:  # a bug rather than a refusal: name the exception, say how to see where
            message = f"{type(e).__name__}: {message} (LCTX_DEBUG=1 shows the traceback)"
        print(f"lctx: error: {message}", file=sys.stderr)
        return exit_status(e)


if __name__ == "__main__":
    sys.exit(main())
