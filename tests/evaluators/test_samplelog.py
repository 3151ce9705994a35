"""A unit run reads only the files that can hold its slice (issue #40: its cost must not grow
with the task): samples.jsonl, every run of the same unit, and units of another slicing."""

from __future__ import annotations

from pathlib import Path

from evaluators.samplelog import SAMPLES_FILE, UNITS_DIR, SampleLog, files_for_unit


def test_a_unit_run_reads_its_own_unit_and_other_slicings_only(tmp_path: Path) -> None:
    units = tmp_path / UNITS_DIR
    units.mkdir()
    (tmp_path / SAMPLES_FILE).write_text('{"task": "t", "id": "s0", "config": "c"}\n')
    files = {"mine-earlier": "u00001of00003-aaaa", "sibling": "u00000of00003-bbbb", "other-slicing": "u00002of00005-cccc"}
    for i, name in enumerate(files.values()):
        (units / f"{name}.jsonl").write_text(f'{{"task": "t", "id": "s{i + 1}", "config": "c"}}\n')
    (units / "u00001of00003-aaaa.json").write_text("{}")  # a unit note, not records
    read = {f.name for f in files_for_unit(tmp_path, "u00001of00003-dddd")}
    assert read == {SAMPLES_FILE, "u00001of00003-aaaa.jsonl", "u00002of00005-cccc.jsonl"}
    assert set(SampleLog(tmp_path, "u00001of00003-dddd").done("t", "c")) == {"s0", "s1", "s3"}
    assert set(SampleLog(tmp_path).done("t", "c")) == {"s0", "s1", "s2", "s3"}  # the task's log reads them all
