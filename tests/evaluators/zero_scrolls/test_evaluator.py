"""ZeroSCROLLS through the run path on a tiny model with crafted validation files: truncated
keeping the query, scored per dataset against every reference of an id, averaged; the test
split records predictions unscored; missing files refused."""

from __future__ import annotations

import json
from pathlib import Path

from evaluators.suite import run_task
from evaluators.zero_scrolls import protocol
from evaluators.zero_scrolls.options import ZeroScrollsOptions
from tests.evaluators.zero_scrolls.test_protocol import example
from tests.helpers import tiny_model, typed


def write_data(root: Path, split: str) -> None:
    long = example("Read the story.\n\n" + "Once upon a time. " * 40 + "\n\nQuestion: Which percent?\n\nAnswer:")
    for d, outputs in {"space_digest": ["40%", None], "narrative_qa": ["a tale", "a story"]}.items():
        (root / "zero_scrolls" / d).mkdir(parents=True, exist_ok=True)
        rows = [{**long, "id": f"{d}1", "output": o if split == "validation" else None} for o in outputs if o]
        (root / "zero_scrolls" / d / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))


def test_missing_files_are_refused(tmp_path: Path) -> None:
    [line] = ZeroScrollsOptions(datasets=["quality"]).missing_files(tmp_path)
    assert str(tmp_path / "zero_scrolls" / "quality" / "validation.jsonl") in line and "tau/zero_scrolls" in line


def test_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    write_data(tmp_path / "data", "validation")
    write_data(tmp_path / "data", "test")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    task = {"name": "zero_scrolls", "datasets": "space_digest,narrative_qa", "chat_template": False,
            "max_new_tokens": 4}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    recs = {r["dataset"]: r for r in map(json.loads, (tmp_path / "out" / "samples.jsonl").read_text().splitlines())}
    assert recs["narrative_qa"]["references"] == ["a tale", "a story"] and recs["space_digest"]["truncated"]
    for d, r in recs.items():
        assert r["prompt_tokens"] <= 512 - 4 + 1 and r["scores"] == protocol.example_score(d, r["prediction"],
                                                                                          r["references"])
    res = typed(result)
    assert res.metric("average").value == (recs["space_digest"]["score"] + recs["narrative_qa"]["score"]) / 2
    test = run_task(loaded, {**task, "split": "test", "datasets": "space_digest"}, tmp_path / "out2",
                    data_dir=tmp_path / "data")
    [rec] = [json.loads(x) for x in (tmp_path / "out2" / "samples.jsonl").read_text().splitlines()]
    assert rec["score"] is None and isinstance(rec["prediction"], str) and typed(test).extra["unscored"] == 1
