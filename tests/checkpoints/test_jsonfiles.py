"""checkpoints/jsonfiles.py on a real full disk (a small tmpfs: the kernel's own ENOSPC):
an append the disk cuts short is taken back, so no torn line survives, and the error names
the file; an atomic write leaves no temporary file behind."""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoints.jsonfiles import BadRecord, append_record, records, write_json_atomic


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "lctx-test-small", str(where)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()}); this test needs a real full device")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_an_append_the_disk_cuts_short_leaves_no_torn_line(small_disk: Path) -> None:
    path = small_disk / "samples.jsonl"
    record = {"id": "x", "text": "y" * 1000}  # 1 KB lines: the last one straddles the end of the device
    written = 0
    with pytest.raises(OSError) as raised:
        for i in range(1000):
            append_record(path, {**record, "id": str(i)})
            written += 1
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = data.splitlines()
    assert len(lines) == written and [json.loads(x)["id"] for x in lines] == [str(i) for i in range(written)]


def test_an_atomic_write_on_a_full_disk_leaves_the_old_file_and_no_temporary(small_disk: Path) -> None:
    path = small_disk / "note.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(OSError) as raised:
        write_json_atomic(path, {"a": "z" * 200_000})
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert json.loads(path.read_text()) == {"a": 1} and [p.name for p in small_disk.iterdir()] == ["note.json"]


def test_a_line_that_is_not_utf8_is_skipped_with_a_warning_or_named(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A torn character (kill -9 inside non-ASCII text of an older writer) spoils its own line only."""
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b", "text": "\xe6\x97"}\n{"id": "c"}\n[1]\n')
    with caplog.at_level("WARNING"):
        assert [r["id"] for _, r in records(path, strict=False)] == ["a", "c"]
    assert f"{path}:2 skipped: not UTF-8" in caplog.text and f"{path}:4 skipped" in caplog.text
    with pytest.raises(BadRecord, match=r"samples.jsonl:2: not UTF-8"):
        list(records(path))


def test_appended_lines_are_ascii_so_a_cut_write_tears_no_character(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_record(path, {"id": "日本", "text": "naïve — ✓"})
    data = path.read_bytes()
    assert data.isascii() and json.loads(data) == {"id": "日本", "text": "naïve — ✓"}
    for cut in range(1, len(data) - 1):  # wherever a write stops, the rest of the file still reads
        path.write_bytes(data[:cut] + b"\n" + data)
        assert [r["id"] for _, r in records(path, strict=False)] == ["日本"]
