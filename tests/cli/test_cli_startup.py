"""`lctx --help` and the client commands start without torch, Ray or transformers:
checked in fresh interpreters, the client commands against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators.registry import registry
from service.app import create_app
from tests.helpers import ThreadServer, free_port, make_settings

HEAVY = ("torch", "ray", "transformers", "triton", "numpy", "sqlalchemy", "alembic", "uvicorn")
# The contracts, the registry, each task folder's __init__ and its options (and RULER's file
# catalogue) import only pydantic: the API schema and the CLI's flags use them. Every other
# evaluator module (torch) is heavy.
LIGHT_EVALUATORS = ("evaluators", "evaluators.options", "evaluators.results", "evaluators.errors",
                    "evaluators.datafiles", "evaluators.registry", "evaluators.progress", "evaluators.eta",
                    # the sequential search's options, which passkey, needle and RULER options inherit
                    "evaluators.sequential", "evaluators.sequential.options")
TASK_FOLDERS = {task.evaluator.partition(":")[0].rpartition(".")[0] for task in registry().values()}
LIGHT_IN_A_TASK_FOLDER = ("options", "files", "score")  # score: its `lctx score` command (argparse)


def light_evaluator(module: str) -> bool:
    folder, _, leaf = module.rpartition(".")
    return module in LIGHT_EVALUATORS or module in TASK_FOLDERS or (folder in TASK_FOLDERS
                                                                    and leaf in LIGHT_IN_A_TASK_FOLDER)


def heavy(modules: set[str] | list[str]) -> list[str]:
    """The heavy modules among `modules`: heavy packages, and evaluators beyond the light ones."""
    return sorted(m for m in modules if m.split(".")[0] in HEAVY and "." not in m
                  or m.startswith("evaluators") and not light_evaluator(m))

# Runs each command in this interpreter, then reports its exit status and which heavy
# modules are loaded by then (after the request was made and answered).
PROBE = """
import json, sys
from cli.main import main
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
try:
    rc = main(argv)
except SystemExit as e:
    rc = e.code
print(json.dumps({"rc": rc, "loaded": sorted(sys.modules)}))
"""


def probe(argv: list[str], cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], capture_output=True,
                         text=True, cwd=cwd, timeout=120, env={**os.environ, "LCTX_HOME": str(cwd / "var")})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rc": result["rc"], "loaded": heavy(result["loaded"])}


def test_help_of_the_console_script_imports_nothing_heavy(tmp_path: Path) -> None:
    lctx = Path(sys.executable).with_name("lctx")
    for argv in (["--help"], ["status", "--help"], ["submit", "--help"], ["train", "--help"]):
        out = subprocess.run([sys.executable, "-X", "importtime", str(lctx), *argv], capture_output=True,
                             text=True, cwd=tmp_path, timeout=120)
        assert out.returncode == 0 and "usage: lctx" in out.stdout, out.stderr[-2000:]
        imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
        assert not heavy({m.split(".")[0] for m in imported} | {m for m in imported if m.startswith("evaluators")}), \
            (argv, heavy(imported))


@pytest.mark.integration
def test_client_commands_import_nothing_heavy(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with ThreadServer(create_app(settings)) as srv:
        url = ["--url", srv.url]
        for argv, rc in ((["status", *url], 0), (["checkpoints", "list", *url], 0),
                         (["results", "nojob", *url], 1),  # 404 from the server: the request was made
                         (["submit", "nope", "--task", "passkey", *url], 1),  # 422: neither name nor path
                         # asks the server itself, no lctx service: nothing listens there, so it says so
                         (["endpoints", "probe", f"http://127.0.0.1:{free_port()}/v1"], 2)):
            result = probe(argv, tmp_path)
            assert result == {"rc": rc, "loaded": []}, (argv, result)
