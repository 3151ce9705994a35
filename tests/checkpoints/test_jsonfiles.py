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

from checkpoints.jsonfiles import append_record, write_json_atomic


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
