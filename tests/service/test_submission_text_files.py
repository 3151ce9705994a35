"""Text files checked where they arrive (evaluators/datafiles.py `text_file_problem`, run by the
submission's data and file-option checks): a haystack of some text then sparse NULs to 2 GB is
refused at submission at once, naming the file and LCTX_MAX_TEXT_FILE_BYTES, and so is a data file
under the limit whose sparse tail would read as NULs; nothing is read past the bounded prefix."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from evaluators.data import file_option_problem, read_text
from evaluators.datafiles import text_file_problem
from evaluators.errors import EvaluatorError
from evaluators.registry import parse_task
from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

TEXT = "The grass is green. The sky is blue. " * 30_000  # about 1 MB of text first


def sparse(path: Path, size: int) -> Path:
    """Text, then a hole to `size` bytes (truncate: nothing written, the tail reads as NULs)."""
    path.write_text(TEXT)
    os.truncate(path, size)
    return path


def test_a_sparse_or_oversized_text_file_is_named_without_reading_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    big = sparse(tmp_path / "hay.txt", 2 << 30)
    started = time.perf_counter()
    problem = file_option_problem(big, "hay.txt")
    assert problem is not None and problem.startswith("hay.txt: it is 2,147,483,648 bytes")
    assert "more than the 1,073,741,824" in problem and "LCTX_MAX_TEXT_FILE_BYTES" in problem
    small = sparse(tmp_path / "small.txt", 8 << 20)  # under the limit: its hole is NULs all the same
    assert "NUL bytes from offset" in (file_option_problem(small, "small.txt") or "")
    assert time.perf_counter() - started < 1.0  # a stat and a seek each, not 2 GB read
    with pytest.raises(EvaluatorError, match="more than the 1,073,741,824"):
        read_text(big, "needle: haystack_file")  # the worker asks before it reads too
    monkeypatch.setenv("LCTX_MAX_TEXT_FILE_BYTES", "1000")
    assert "more than the 1,000" in (text_file_problem(tmp_path / "small.txt") or "")
    plain = tmp_path / "plain.txt"
    plain.write_text(TEXT)
    assert text_file_problem(plain, 2 << 20) is None and file_option_problem(plain, "plain.txt", max_bytes=2 << 20) \
        is None


def test_data_files_are_checked_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "qasper.jsonl").write_text(json.dumps({"input": "q", "context": "c", "answers": ["a"], "length": 3}) + "\n")
    options = parse_task({"name": "longbench", "datasets": ["qasper"]})
    assert options.data_problems(data) == []
    os.truncate(data / "qasper.jsonl", 64 << 20)
    (problem,) = options.data_problems(data)
    assert "qasper.jsonl" in problem and "NUL bytes from offset" in problem
    (problem,) = options.data_problems(data, max_text_bytes=1 << 20)
    assert "more than the 1,048,576" in problem


@pytest.mark.integration  # a server on loopback
def test_a_2gb_sparse_haystack_is_refused_at_submission_quickly(tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny")
    data = tmp_path / "data"
    data.mkdir()
    sparse(data / "hay.txt", 2 << 30)
    needle = {"name": "needle", "lengths": [64], "depths": [50], "haystack_file": "hay.txt"}
    with ThreadServer(create_app(make_settings(tmp_path, data_dir=data))) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as c:
        started = time.perf_counter()
        r = c.post("/v1/jobs", json={"checkpoint": "./tiny", "tasks": [needle]})
        took = time.perf_counter() - started
        assert r.status_code == 422, r.text
        assert "tasks[0].haystack_file: hay.txt: it is 2,147,483,648 bytes" in r.text
        assert "LCTX_MAX_TEXT_FILE_BYTES" in r.text and str(data) not in r.text
        assert took < 5  # nothing read past the stat
    settings = make_settings(tmp_path, data_dir=data, max_text_file_bytes=4 << 30)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        r = c.post("/v1/jobs", json={"checkpoint": "./tiny", "tasks": [needle]})
        assert r.status_code == 422 and "NUL bytes from offset" in r.text  # within the limit: the hole
