"""Adding a task is one folder (docs/architecture.md, "How to add ... A task"): a toy task
written as `evaluators/toy/` — and nothing else edited — is in the registry, in `lctx eval`'s
help and flags, in the API's request schema and description, and runs through `lctx eval`.

The folder goes into a copy of the `evaluators` package (the source tree is not touched),
put first on the path of a fresh interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import evaluators
from evaluators.suite import RESULTS_FILE
from tests.helpers import tiny_checkpoint
from tests.toy_task import TOY_TASK_FILES

ROOT = Path(__file__).resolve().parents[2]

TOY = TOY_TASK_FILES

PROBE = """
import contextlib, io, json, sys
from cli.main import main
from evaluators.registry import task_names
from service.app import create_app
from service.core.settings import Settings

help_text = io.StringIO()
with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
    main(["eval", "--help"])
schema = create_app(Settings(home=sys.argv[1], executor=False, scheduler=False)).openapi()
rc = main(["eval", "--checkpoint", sys.argv[2], "--task", "toy", "--words", "3", "--out", sys.argv[3], "-q"])
print(json.dumps({"tasks": task_names(), "help": help_text.getvalue(), "schema": schema, "rc": rc}))
"""


@pytest.mark.integration  # fresh interpreters and a real run
def test_a_toy_task_is_one_folder(tmp_path: Path) -> None:
    package = tmp_path / "src" / "evaluators"
    shutil.copytree(Path(evaluators.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "toy").mkdir()
    for name, text in TOY.items():
        (package / "toy" / name).write_text(textwrap.dedent(text).lstrip())
    checkpoint = tiny_checkpoint(tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "var"), str(checkpoint), str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    assert "toy" in seen["tasks"]
    assert "toy: repeat a word, exact match" in " ".join(seen["help"].split())  # --task's help
    assert "--words" in seen["help"]  # a flag made from its option model
    schemas = seen["schema"]["components"]["schemas"]
    assert schemas["ToyTask"]["properties"]["words"]["maximum"] == 4  # the request schema
    assert "`toy`: repeat a word, exact match" in seen["schema"]["info"]["description"]
    assert seen["rc"] == 0
    results = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())["results"]
    assert results["toy"]["result"]["metrics"][0]["n"] == 3
    assert not (Path(evaluators.__file__).parent / "toy").exists()  # the source tree was not touched
