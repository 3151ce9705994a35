"""Every command block of the README and of the guide's pages (docs/, in the order of
mkdocs.yml's nav), run as written against a real `lctx serve` on a fresh home, in that order;
the test fails on the first block that fails. Before the first block, what that fresh start
put in place: the demo checkpoints copied and registered, the real model registered (what a
newcomer meets first; the demos' and the real model's passkey scores are tests/training's and
tests/checkpoints/test_model_real.py's).

What the test changes, and only that:
- the API's port: `127.0.0.1:8000` becomes a free port (LCTX_PORT is set for the CLI too);
- `curl` fails on an HTTP error (`--fail-with-body`), as a person reading the answer would;
- `make` is a dry run (`make -n`): `make serve` would not return and `make test` runs this test;
- a block may be scaled down by a marker on the line above its fence,
  `<!-- readme-test: OLD => NEW -->` (e.g. fewer trials), visible in the page's source;
- a block whose line above starts with "Needs " says what it needs that a fresh `make serve`
  on this machine does not have (Docker, a GPU node, data files): it is not run, and the test
  checks that such a line is there rather than letting a block fail;
- a block of `lctx eval`, `inspect` and `generate` commands only (each opens its checkpoint in
  its own process and never asks the API) runs beside the blocks that use the server, in its
  own order: the two lanes share the machine's cores (a block of them reads only what the
  server's start put in place, the demo and real checkpoints).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers import free_port, wait_for
from training.train import demo_checkpoints

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*=>\s*(.*?)\s*-->")
# Commands that run without the API: a block made of them only runs beside the server's blocks.
BESIDE = re.compile(r"\.venv/bin/lctx (eval|inspect|generate) ")
PRELUDE = """
curl() { command curl --fail-with-body "$@"; }
make() { command make -n -C "$LCTX_REPO" "$@"; }
"""


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    code: str
    needs: str | None  # the "Needs ..." line above, when there is one
    replacements: list[tuple[str, str]]


def readme_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            start, body = i, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            above = [x for x in lines[max(0, start - 5):start] if x.strip()]
            replacements = [m.groups() for x in above for m in [MARKER.search(x)] if m]
            prose = [x for x in above if not MARKER.search(x)]
            needs = prose[-1].strip() if prose and prose[-1].strip().startswith("Needs ") else None
            blocks.append(Block(start + 1, "\n".join(body), needs, replacements))
        i += 1
    return blocks


def runs_beside_the_server(code: str) -> bool:
    """Every command of the block (continued lines joined, comments dropped) is `lctx eval`,
    `inspect` or `generate`."""
    commands = [x.split("#")[0].strip() for x in code.replace("\\\n", " ").splitlines()]
    commands = [x for x in commands if x]
    return bool(commands) and all(BESIDE.match(x) for x in commands)


def nav_pages(nav: object) -> list[str]:
    """The Markdown files of mkdocs.yml's nav, in order (generated pages have no file)."""
    if isinstance(nav, str):
        return [nav] if (REPO / "docs" / nav).is_file() else []
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in nav_pages(v)]
    return [p for v in nav for p in nav_pages(v)] if isinstance(nav, list) else []


def command_pages() -> list[Path]:
    """The README, then every page of the guide in nav order."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [REPO / "README.md", *(REPO / "docs" / page for page in nav_pages(nav))]


def test_blocks_are_found_and_markers_parse() -> None:
    blocks = readme_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert blocks[0].line == 3 and "make serve" in blocks[0].code and "make test" in blocks[0].code
    assert blocks[0].needs is None
    pages = command_pages()
    guide = [b for page in pages[1:] for b in readme_blocks(page.read_text(encoding="utf-8"))]
    assert {p.name for p in pages} >= {"service.md", "real-model.md", "deploy.md", "evaluators.md"}
    assert any(b.replacements for b in blocks) and any(b.needs for b in blocks)
    assert any(b.replacements for b in guide) and any(b.needs for b in guide)
    beside = [b for b in blocks + guide if not b.needs and runs_beside_the_server(b.code)]
    assert len(beside) >= 4 and all("curl" not in b.code and " submit " not in b.code for b in beside)
    assert runs_beside_the_server(".venv/bin/lctx eval --checkpoint c \\\n  --task passkey   # a comment")
    assert not runs_beside_the_server(".venv/bin/lctx eval --checkpoint c\n.venv/bin/lctx submit c --wait")
    assert not runs_beside_the_server("cp -r a b\n.venv/bin/lctx generate --checkpoint b")
    for page in pages:
        for b in readme_blocks(page.read_text(encoding="utf-8")):
            for old, _ in b.replacements:
                assert old in b.code, f"{page.name} line {b.line}: the marker replaces {old!r}, which the block lacks"


@pytest.mark.integration
def test_every_readme_command_block_runs_against_a_fresh_server(ray_cluster: str, real_model: Path,
                                                                 tmp_path: Path) -> None:
    from service.demo import REAL_MODEL, real_model_dir

    port = free_port()
    work = tmp_path / "clone"  # where a user's `make serve` runs: var/ is made here
    work.mkdir()
    # The real model's conversion, as a second `make serve` finds it (the conversion is the fixture's).
    shutil.copytree(real_model, real_model_dir(work / "var" / "checkpoints"), copy_function=os.link)
    (work / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = dict(os.environ, LCTX_PORT=str(port), LCTX_HOST="127.0.0.1", LCTX_RAY_ADDRESS=ray_cluster,
               LCTX_REPO=str(REPO), LCTX_POLL_INTERVAL="0.1", LCTX_DEMO_REAL_MODEL="true")  # make serve's default
    for key in ("LCTX_HOME", "LCTX_CHECKPOINT_ROOTS", "LCTX_DATA_DIR", "LCTX_DATABASE_URL", "LCTX_API_TOKEN"):
        env.pop(key, None)
    log = tmp_path / "serve.log"
    server = subprocess.Popen([str(work / ".venv" / "bin" / "lctx"), "serve", "--log-level", "warning"], cwd=work,
                              env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200 \
                    or server.poll() is not None
            except httpx.HTTPError:
                return False

        wait_for(ready, 120, 0.2, "lctx serve ready")
        assert server.poll() is None, log.read_text()

        def real_model_ready() -> bool:  # the README's first finding waits for the server to say so
            names = [c["name"] for c in httpx.get(f"http://127.0.0.1:{port}/v1/checkpoints", timeout=10).json()]
            return REAL_MODEL in names or server.poll() is not None

        wait_for(real_model_ready, 180, 0.5, "the real model registered")
        # What the fresh `make serve` put in place before any block changes it: the committed demos
        # copied under the first root and registered, the real model's conversion registered.
        assert "registered demo checkpoints: demo-" in log.read_text()
        listed = {c["name"]: c for c in httpx.get(f"http://127.0.0.1:{port}/v1/checkpoints", timeout=10).json()}
        assert set(demo_checkpoints()) <= set(listed)
        assert listed["demo-softpick"]["path"] == "demo-softpick"  # relative to the first root, var/checkpoints
        assert (work / "var" / "checkpoints" / "demo-softpick" / "config.json").is_file()
        real = httpx.get(f"http://127.0.0.1:{port}/v1/checkpoints/{REAL_MODEL}", timeout=10).json()
        assert real["path"] == REAL_MODEL, real  # outside the roots: shown by its name
        assert real["family"] == "llama" and real["context_length"] == 8192
        assert real["chat_template"] == "chat_template.jinja" and real["source"]["kind"] == "gguf"
        blocks = [(page, b) for page in command_pages() for b in readme_blocks(page.read_text(encoding="utf-8"))
                  if not b.needs]
        beside = [(page, b) for page, b in blocks if runs_beside_the_server(b.code)]
        failed = threading.Event()  # the other lane stops at its next block

        def run(page: Path, block: Block) -> None:
            code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            for old, new in block.replacements:
                code = code.replace(old, new)
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", PRELUDE + code], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, (f"{page.relative_to(REPO)} block at line {block.line} failed ({proc.returncode}):\n{code}\n"
                                          f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")

        def run_all(lane: list[tuple[Path, Block]]) -> int:
            for ran, (page, block) in enumerate(lane):
                if failed.is_set():
                    return ran
                try:
                    run(page, block)
                except BaseException:
                    failed.set()
                    raise
            return len(lane)

        with ThreadPoolExecutor(1) as pool:
            beside_ran = pool.submit(run_all, beside)
            ran = run_all([x for x in blocks if x not in beside]) + beside_ran.result()
        assert ran >= 8
    finally:
        server.terminate()
        server.wait(60)
