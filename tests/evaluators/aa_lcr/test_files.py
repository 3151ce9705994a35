"""AA-LCR's documents confined to their set folder (evaluators/aa_lcr/files.py): a CSV naming
`../../etc/passwd`, an absolute path, a category of `..`, or a symlink in a set folder that points
out is refused at submission's check and never read by a run; every document a run reads is in
its data revision, so a document changed in place changes the revision."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from evaluators.aa_lcr import files
from evaluators.data import read_files
from evaluators.provenance import data_record
from evaluators.registry import make_evaluator, parse_task
from evaluators.run import planned_samples
from tests.helpers import AA_LCR_COLUMNS, aa_lcr_files


def rewrite(root: Path, **changes: str) -> None:
    """Question 7's row of the CSV with `changes` (column -> value)."""
    path = root / files.CSV_FILE
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    rows[0].update(changes)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, AA_LCR_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize("changes", [
    {"data_source_filenames": "b.txt;../../../../../../etc/passwd"},
    {"data_source_filenames": "/etc/passwd"},
    {"data_source_filenames": "..\\..\\secret.txt"},
    {"document_category": ".."},
    {"document_set_id": "../../../.."},
])
def test_a_csv_naming_a_file_outside_its_set_is_refused(tmp_path: Path, changes: dict[str, str]) -> None:
    root = aa_lcr_files(tmp_path / "data")
    (tmp_path / "data" / "secret.txt").write_text("SECRET")
    rewrite(root, **changes)
    options = parse_task({"name": "aa_lcr", "judge": "grader"})
    problems = options.data_problems(tmp_path / "data")
    assert len(problems) == 1 and "outside" in problems[0] and "AA-LCR question 7" in problems[0]
    evaluator = make_evaluator(options, tmp_path / "data")
    with pytest.raises(files.OutsideSet):
        planned_samples(evaluator, None)  # type: ignore[arg-type]
    q = files.read_questions(root / files.CSV_FILE)[0]
    with pytest.raises(files.OutsideSet):
        files.read_documents(root, q)


def test_a_symlink_pointing_out_of_its_set_is_refused(tmp_path: Path) -> None:
    root = aa_lcr_files(tmp_path / "data")
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0")
    legal = root / "lcr" / "Legal" / "legal_lease"
    (legal / "a.txt").unlink()
    (legal / "a.txt").symlink_to(outside)
    options = parse_task({"name": "aa_lcr", "judge": "grader"})
    assert any("resolves outside its set folder" in p and "a.txt" in p for p in options.data_problems(tmp_path / "data"))
    q = files.read_questions(root / files.CSV_FILE)[0]
    with pytest.raises(files.OutsideSet, match="a.txt"):
        files.read_documents(root, q)
    # a set folder that is a symlink out of lcr/ too
    (root / "lcr" / "Legal" / "legal_lease").rename(tmp_path / "elsewhere")
    (root / "lcr" / "Legal" / "legal_lease").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(files.OutsideSet, match="lies outside lcr/"):
        files.read_documents(root, q)
    # a symlink that stays inside the set is a document like any other
    (root / "lcr" / "Legal" / "legal_lease").unlink()
    (tmp_path / "elsewhere").rename(legal)
    (legal / "a.txt").unlink()
    (legal / "real.txt").write_text("Lease A: the tenant is Ada.")
    (legal / "a.txt").symlink_to("real.txt")
    assert files.read_documents(root, q)[1] == "Lease A: the tenant is Ada."


def test_every_document_read_is_in_the_data_revision(tmp_path: Path) -> None:
    root = aa_lcr_files(tmp_path / "data")
    options = parse_task({"name": "aa_lcr", "judge": "grader", "limit": 1})

    def revision() -> dict:
        evaluator = make_evaluator(options, tmp_path / "data")
        planned_samples(evaluator, None)  # type: ignore[arg-type]
        return data_record(options, tmp_path / "data", evaluator.data_log, read_files(options, tmp_path / "data"))

    before = revision()
    assert sorted(f["file"] for f in before["files"]) == ["aa_lcr/AA-LCR_Dataset.csv",
                                                          "aa_lcr/lcr/Legal/legal_lease/a.txt",
                                                          "aa_lcr/lcr/Legal/legal_lease/b.txt"]
    (root / "lcr" / "Legal" / "legal_lease" / "a.txt").write_text("Lease A: the tenant is Bob.")
    assert revision()["revision"] != before["revision"]  # the CSV is the same; a document changed
