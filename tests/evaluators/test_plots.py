"""matplotlib is off the start-up path: importing the evaluators does not load it; the plots
import it when they draw, or ahead of that on a background thread (`draw_ahead` starts it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def test_the_evaluators_import_without_matplotlib_and_the_draw_imports_it_ahead() -> None:
    out = run("import sys\n"
              "import evaluators.suite, evaluators.ruler.evaluator, evaluators.passkey.evaluator\n"
              "print('matplotlib' in sys.modules)\n"
              "from checkpoints.tokenizer import ByteTokenizer\n"
              "from evaluators.suite import draw_ahead\n"
              "import threading\n"
              "_, drawn = draw_ahead([{'name': 'passkey', 'lengths': [64], 'trials': 1}], ByteTokenizer())\n"
              "drawn.result()\n"
              "[t.join() for t in threading.enumerate() if t.name == 'lctx-import-plots']\n"
              "print('matplotlib.pyplot' in sys.modules, __import__('matplotlib').get_backend().lower())")
    assert out.splitlines() == ["False", "True agg"]
