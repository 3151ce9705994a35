"""How many files and places each kind of change touches, measured (issue #24).

Each change is made for real in a fresh clone of this repository's HEAD: the files are
written or edited, the clone's diff is counted (new files, edited files, edited places =
diff hunks), and a check in a fresh interpreter on the clone shows the change reached
everything it should (registry, CLI help, API schema, stored job, ...) with no other edit.

    python bench/touch_count.py   # -> bench/results/touch_count.{json,md}
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.toy_task import TOY_TASK_FILES  # noqa: E402 - the one copy of the toy task

RESULTS = ROOT / "bench" / "results"

# What the issue counted before the change (issue #24's text), for the table.
BEFORE = {
    "task": "3 files and 4 places plus hidden lists (CLI --task help, API description)",
    "job field": "about 9 files and 15 places",
    "attention variant": "1 layer file + 1 registry line + hand edits in 3 test tables",
    "RoPE method": "1 function + 1 row",
    "series axis": "results.Axis + a regex in columns.js",
}

TOY_TASK = {
    **{f"evaluators/toy/{name}": text for name, text in TOY_TASK_FILES.items()},
    "tests/evaluators/test_toy.py": '''
        from evaluators import validate_task


        def test_toy_defaults() -> None:
            assert validate_task({"name": "toy"}) == {"name": "toy", "words": 2}
    ''',
}

TOY_VARIANT = '''
    """A toy softmax-family tweak: softmax with the logits halved (for counting touches)."""

    from typing import ClassVar

    from checkpoints.attention.softmax.layer import SoftmaxAttention


    class HalfAttention(SoftmaxAttention):
        variant: ClassVar[str] = "half"

        def logit_scale(self) -> float:
            return 0.5 * super().logit_scale()
'''


def write(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def edit(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / name
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{name}: the anchor {old!r} is not there exactly once; update bench/touch_count.py")
    path.write_text(text.replace(old, new))


def task(repo: Path) -> str:
    write(repo, TOY_TASK)
    return """
import contextlib, io
from cli.main import main
from evaluators.registry import task_names
from service.app import create_app
from service.core.settings import Settings
assert "toy" in task_names()
text = io.StringIO()
with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
    main(["eval", "--help"])
assert "toy: repeat a word" in " ".join(text.getvalue().split()) and "--words" in text.getvalue()
schema = create_app(Settings(home="var", executor=False, scheduler=False)).openapi()
assert "ToyTask" in schema["components"]["schemas"] and "`toy`" in schema["info"]["description"]
"""


def job_field(repo: Path) -> str:
    edit(repo, "service/schemas.py", "    rope: Rope = None\n",
         "    rope: Rope = None\n    note: str | None = Field(None, max_length=200, description=\"a note kept with "
         "the job\")\n")
    return """
from cli.client_commands import job_flags
from service.schemas import JobCreate, JobOut
from service.core.settings import Settings
from service.store import Store
from service.views import job_out
assert "note" in job_flags() and "note" in JobCreate.model_fields and "note" in JobOut.model_fields
store = Store("sqlite:///touch.db")
store.upgrade()  # no migration: the request is stored whole
row = store.add_job(checkpoint="c", checkpoint_path="/c", fingerprint="f" * 64, tasks=[{"name": "passkey"}],
                    rope=None, backend="auto", priority=0, note="kept")
assert job_out(store.get_job(row.id), Settings(home="var")).note == "kept"
"""


def attention_variant(repo: Path) -> str:
    write(repo, {"checkpoints/attention/softmax/half.py": TOY_VARIANT})
    edit(repo, "checkpoints/attention/registry.py", '    "softmax": "checkpoints.attention.softmax.layer:SoftmaxAttention",\n',
         '    "softmax": "checkpoints.attention.softmax.layer:SoftmaxAttention",\n'
         '    "half": "checkpoints.attention.softmax.half:HalfAttention",\n')
    return """
from checkpoints.attention.registry import available_variants
from tests.helpers import softmax_family_variants
assert "half" in available_variants() and "half" in softmax_family_variants()  # the tests' cases follow
"""


def rope_method(repo: Path) -> str:
    edit(repo, "checkpoints/rope.py", "def ntk_freq(",
         "def halved_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:\n"
         "    return default_inv_freq(dim, base) / 2\n\n\ndef ntk_freq(")
    edit(repo, "checkpoints/rope.py", '    RopeMethod("default", default_freq),\n',
         '    RopeMethod("default", default_freq),\n    RopeMethod("halved", halved_freq),\n')
    return """
from checkpoints.config import ModelConfig
from checkpoints.rope import ROPE_METHODS, parse_rope_override
assert "halved" in ROPE_METHODS
cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=1, intermediate_size=64, vocab_size=2)
assert parse_rope_override("halved", cfg).type == "halved"
"""


def series_axis(repo: Path) -> str:
    edit(repo, "evaluators/results.py", '"bucket", "layer"]', '"bucket", "layer", "temperature"]')
    return """
from evaluators.results import series
s = series("accuracy", "temperature", "fraction", True, [(1, 0.5, 2)])
assert s.axis == "temperature"
"""


CHANGES = {"task": task, "job field": job_field, "attention variant": attention_variant,
           "RoPE method": rope_method, "series axis": series_axis}


def count(repo: Path) -> dict[str, object]:
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True, check=True).stdout  # noqa: E731
    git("add", "-A")
    status = [line.split("\t") for line in git("diff", "--cached", "--name-status").splitlines()]
    new = sorted(p for s, p in status if s == "A")
    edited = sorted(p for s, p in status if s != "A")
    places = len(re.findall(r"^@@", git("diff", "--cached", "-U0", "--", *edited), re.M)) if edited else 0
    tests = [p for p in new + edited if p.startswith("tests/")]
    return {"new_files": new, "edited_files": edited, "edited_places": places,
            "files": len(new) + len(edited), "test_files": len(tests)}


def measure(name: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        check = CHANGES[name](repo)
        counted = count(repo)  # before the check writes its own files (a database, var/)
        env = {**os.environ, "PYTHONPATH": str(repo)}
        out = subprocess.run([sys.executable, "-c", check], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=300)
        if out.returncode != 0:
            raise SystemExit(f"{name}: the change did not take effect:\n{out.stderr[-2000:]}")
        return {"change": name, **counted, "checked": True, "before": BEFORE[name]}


def main() -> None:
    rows = [measure(name) for name in CHANGES]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "touch_count.json").write_text(json.dumps({"commit": commit.strip(), "changes": rows}, indent=2) + "\n")
    lines = [f"# Touch count of each kind of change (commit {commit.strip()}, bench/touch_count.py)", "",
             "| change | files | of which tests | new files | edited files | edited places | before (issue #24) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['change']} | {r['files']} | {r['test_files']} | {', '.join(r['new_files']) or '-'} | "
                     f"{', '.join(r['edited_files']) or '-'} | {r['edited_places']} | {r['before']} |")
    (RESULTS / "touch_count.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
