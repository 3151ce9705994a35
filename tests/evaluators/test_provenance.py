"""What data a result ran on (evaluators/provenance.py): each file hashed once (streamed, cached
by path, size and mtime), the files a run read recorded in its entry with their sha256 and
nothing for a task that reads none, hub snapshots with their commit, a revision that follows
the content and not the names, files known to be faulty warned of."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import ClassVar

from evaluators import run_task
from evaluators.data import note_snapshot, read_files
from evaluators.graphwalks.options import GraphwalksOptions
from evaluators.options import TaskOptions
from evaluators.provenance import BLOCK, DataLog, data_record, note_files, noting, sha256_of, warn
from tests.helpers import tiny_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_sha256_is_streamed_and_computed_once_per_path_size_and_mtime(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    data = os.urandom(3 * BLOCK + 17)  # several blocks and a tail
    big.write_bytes(data)
    assert sha256_of(big) == hashlib.sha256(data).hexdigest()
    stat = big.stat()
    big.write_bytes(bytes(len(data)))  # same size; its mtime put back: the cache answers
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sha256_of(big) == hashlib.sha256(data).hexdigest()
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched: hashed again
    assert sha256_of(big) == hashlib.sha256(bytes(len(data))).hexdigest()


def test_a_run_records_the_file_it_read(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    haystack = tmp_path / "haystack.txt"
    haystack.write_text("The grass is green. The sky is blue. " * 20)
    entry = run_task(loaded, {"name": "needle", "lengths": [64], "depths": [50], "haystack_file": str(haystack)},
                     tmp_path / "out")
    assert entry["data"]["files"] == [{"file": "haystack.txt", "option": "haystack_file", "bytes": 740,
                                       "sha256": hashlib.sha256(haystack.read_bytes()).hexdigest()}]
    assert entry["data"]["hub"] == [] and entry["data"]["warnings"] == [] and len(entry["data"]["revision"]) == 12


def test_a_task_reading_no_file_records_nothing(tmp_path: Path) -> None:
    entry = run_task(tiny_model(tmp_path / "m"), {"name": "passkey", "lengths": [64], "trials": 1}, tmp_path / "out")
    assert "data" not in entry  # its haystack is built in


def write_sets(root: Path, content: bytes) -> None:
    (root / "graphwalks").mkdir(parents=True)
    (root / "graphwalks" / "graphwalks_128k_and_shorter.parquet").write_bytes(content)


def test_the_revision_follows_the_content_not_the_place(tmp_path: Path) -> None:
    opts = GraphwalksOptions(sets=["128k_and_shorter"])
    for name, content in (("a", b"one"), ("b", b"one"), ("c", b"two")):
        write_sets(tmp_path / name, content)
    rev = {name: data_record(opts, tmp_path / name, DataLog(), read_files(opts, tmp_path / name))["revision"]
           for name in "abc"}
    assert rev["a"] == rev["b"] != rev["c"]
    record = data_record(opts, tmp_path / "a", DataLog(), read_files(opts, tmp_path / "a"))
    assert record["files"] == [{"file": "graphwalks/graphwalks_128k_and_shorter.parquet",
                                "sha256": hashlib.sha256(b"one").hexdigest(), "bytes": 3}]


def test_a_hub_snapshot_is_recorded_with_its_commit_and_files(tmp_path: Path) -> None:
    snapshot = tmp_path / "datasets--openai--graphwalks" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "graphwalks_128k_and_shorter.parquet").write_bytes(b"rows")
    (snapshot / "README.md").write_text("card")
    log = DataLog()
    with noting(log):
        note_snapshot("openai/graphwalks", snapshot, ["graphwalks_128k_and_shorter.parquet"])
        warn("the file is old")
        warn("the file is old")  # said once
    note_files([tmp_path / "elsewhere.txt"])  # outside `noting`: goes nowhere
    record = data_record(GraphwalksOptions(sets=["128k_and_shorter"]), None, log, [])
    assert record["hub"] == [{"repo": "openai/graphwalks", "revision": COMMIT}]
    assert record["files"] == [{"file": "graphwalks_128k_and_shorter.parquet",
                                "sha256": hashlib.sha256(b"rows").hexdigest(), "bytes": 4}]
    assert record["warnings"] == ["the file is old"]
    unnamed = tmp_path / "not-a-commit"
    unnamed.mkdir()
    log = DataLog()
    with noting(log):
        note_snapshot("openai/graphwalks", unnamed, ["*.parquet"])
    assert log.hub == [{"repo": "openai/graphwalks", "revision": None, "config": None, "files": []}]


class Stale(TaskOptions):
    task: ClassVar[str] = "stale"
    stale_sha256: ClassVar[dict[str, str]] = {hashlib.sha256(b"old").hexdigest(): "the release before the fix"}

    def data_files(self, data_dir: Path) -> list[Path]:
        return [Path(data_dir) / "x.parquet"]


def test_a_file_known_to_be_faulty_is_warned_of_whatever_its_name(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"old")
    record = data_record(Stale(), tmp_path, DataLog(), read_files(Stale(), tmp_path))
    assert record["warnings"] == ["x.parquet: the release before the fix"]
    (tmp_path / "x.parquet").write_bytes(b"new")
    assert data_record(Stale(), tmp_path, DataLog(), read_files(Stale(), tmp_path))["warnings"] == []
