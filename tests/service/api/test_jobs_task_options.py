"""Task options and results through the API: each task's options in OpenAPI (built from
the evaluators' option models), bad options refused with a 422 that names the field, and
the leaderboard reading typed results and results.json of the layout before them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from evaluators import TASK_OPTIONS
from service.app import create_app
from service.core.layout import job_dir, task_dir
from service.core.status import SUCCEEDED
from service.store import Store
from tests.helpers import OLD_RESULTS as OLD
from tests.helpers import ThreadServer, make_settings, store_results

pytestmark = pytest.mark.integration  # a server on loopback


@pytest.fixture
def served(tmp_path: Path, models: Path):
    data = tmp_path / "data"
    (data / "quality").mkdir(parents=True)  # SCROLLS' layout: <task>/<split>.jsonl
    (data / "quality" / "validation.jsonl").write_text('{"id": "q1", "pid": "q1_0", "input": "Q? (A) a (B) b", '
                                                       '"output": "a"}\n')
    settings = make_settings(tmp_path, data_dir=data)
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        yield c, settings


def schema_name(task: str) -> str:
    """The request schema's name of a task: "longbench_v2" -> "LongbenchV2Task"."""
    return f"{task.title().replace('_', '')}Task"


def test_openapi_shows_each_tasks_options(served) -> None:
    c, _ = served
    schemas = c.get("/openapi.json").json()["components"]["schemas"]
    for name, model in TASK_OPTIONS.items():
        spec = schemas[schema_name(name)]
        assert set(spec["properties"]) == {"name", *model.model_fields}, name
        assert spec["properties"]["name"]["const"] == name and spec["additionalProperties"] is False
        for option in model.file_options():
            assert spec["properties"][option]["x-file"] is True
    lengths = schemas["PasskeyTask"]["properties"]["lengths"]
    assert lengths["x-selects"] is True and lengths["maxItems"] == 1000
    assert lengths["items"] == {"type": "integer", "exclusiveMinimum": 0, "maximum": 10_000_000}
    assert set(schemas["PerplexityTask"]["required"]) == {"text_file", "name"}
    tasks = schemas["Suite"]["properties"]["tasks"]["items"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in tasks["oneOf"]} == {schema_name(n) for n in TASK_OPTIONS}


@pytest.mark.parametrize(("task", "loc", "message"), [
    ({"name": "passkey", "lenghts": [256]}, ["lenghts"], "Extra inputs are not permitted"),
    ({"name": "passkey", "lengths": [True]}, ["lengths", 0], "valid integer"),
    ({"name": "passkey", "lengths": [256, 2.5]}, ["lengths", 1], "valid integer"),
    ({"name": "passkey", "lengths": [100_000_000]}, ["lengths", 0], "less than or equal to 10000000"),
    ({"name": "passkey", "lengths": list(range(1, 1002))}, ["lengths"], "at most 1000"),
    ({"name": "passkey", "trials": 0}, ["trials"], "greater than or equal to 1"),
    ({"name": "passkey", "trials": 1_000_000}, ["trials"], "less than or equal to 100000"),
    ({"name": "needle", "depths": [101]}, ["depths", 0], "less than or equal to 100"),
    ({"name": "longbench", "e": "yes"}, ["e"], "valid boolean"),
    ({"name": "longbench", "datasets": ["dureader"], "e": True}, [], "unknown LongBench-E datasets"),
    ({"name": "scrolls", "split": "dev"}, ["split"], "'validation'"),
    ({"name": "perplexity"}, ["text_file"], "Field required"),
    ({"name": "diagnostics", "samples": 10**6}, ["samples"], "less than or equal to 10000"),
])
def test_bad_options_are_422_naming_the_field(served, task: dict, loc: list, message: str) -> None:
    c, _ = served
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "passkey"}, task]})
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(e["loc"] == ["body", "tasks", 1, task["name"], *loc] and message in e["msg"] for e in errors), errors
    assert c.get("/v1/jobs").json()["total"] == 0


def test_unknown_task_is_422_listing_the_tasks(served) -> None:
    c, _ = served
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "passkee"}]})
    assert r.status_code == 422
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "tasks", 0] and "unknown task" in error["msg"] and "passkey" in error["msg"]


def test_jobs_record_every_option_and_keep_the_request_shape(served) -> None:
    c, _ = served
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
        {"name": "passkey", "lengths": [256, 512], "trials": 100}, {"name": "scrolls", "datasets": ["quality"]}]})
    assert r.status_code == 202, r.text
    passkey, scrolls = r.json()["tasks"]
    assert passkey == {"name": "passkey", "lengths": [256, 512], "trials": 100, "seed": 0, "max_new_tokens": 10,
                       "chat_template": False, "stop_when_decided": False, "thinking": "default",
                       "thinking_budget": 2048, "search": "grid", "search_lengths": "given", "search_min": None, "search_max": None,
                       "search_block": 5, "search_alpha": 0.05, "search_threshold": 0.5}
    assert scrolls["tasks"] == ["quality"] and "datasets" not in scrolls  # the alias folds into its option


def test_leaderboard_reads_results_of_the_old_layout(served) -> None:
    """Jobs finished before the typed results keep showing, with the same numbers."""
    c, settings = served
    store = Store(settings.database)
    try:
        fingerprint = c.get("/v1/checkpoints/tiny").json()["fingerprint"]
        for name in ("passkey", "longbench", "perplexity"):
            job = store.add_job(fingerprint=fingerprint, checkpoint="tiny", checkpoint_path="/m/tiny",
                                tasks=[{"name": name}], rope=None, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            job_dir(settings, job.id).mkdir(parents=True)
            store_results(settings, store, job.id, {name: OLD[name]})
    finally:
        store.close()
    board = c.get("/v1/leaderboard", params={"task": "passkey"}).json()
    assert board["headline"] == "accuracy" and board["rows"][0]["values"]["accuracy"] == 0.75
    assert board["rows"][0]["values"]["accuracy.length=512"] == 0.5
    info = {col["name"]: col for col in board["column_info"]}
    assert info["accuracy"] == {"name": "accuracy", "higher_is_better": True, "unit": "fraction", "kind": "metric",
                                "series": None, "axis": None, "key": None}
    assert {k: info["accuracy.length=512"][k] for k in ("kind", "series", "axis", "key")} == {
        "kind": "point", "series": "accuracy", "axis": "length", "key": "512"}  # told, not parsed by the pages
    board = c.get("/v1/leaderboard", params={"task": "longbench/lcc"}).json()
    assert board["rows"][0]["values"] == {"score": 40.0, "score.bucket=0-4k": 40.0, "score.bucket=4-8k": None,
                                          "score.bucket=8k+": None}
    assert board["column_info"][-1]["axis"] == "bucket" and board["column_info"][-1]["key"] == "8k+"
    board = c.get("/v1/leaderboard", params={"task": "perplexity"}).json()
    assert board["rows"][0]["values"]["perplexity"] == 7.5
    assert {col["name"]: col["higher_is_better"] for col in board["column_info"]}["perplexity.length=40"] is False
    assert json.dumps(board)  # plain JSON


GENERATION_TASKS = ("passkey", "needle", "ruler", "longbench", "scrolls")


def test_every_generation_task_takes_the_one_chat_template_option(served) -> None:
    """Declared once (same type, same mark, one wording of where the template is looked
    for), each task with its benchmark's default; asking for it on a checkpoint without a
    template is refused at submission, naming the task, the option and the files."""
    from evaluators.options import CHAT

    c, _ = served
    schemas = c.get("/openapi.json").json()["components"]["schemas"]
    for name in GENERATION_TASKS:
        field = TASK_OPTIONS[name].model_fields["chat_template"]
        assert field.default is False and field.json_schema_extra == {CHAT: True}
        shown = schemas[f"{name.title()}Task"]["properties"]["chat_template"]
        assert shown["type"] == "boolean" and "chat_template.jinja" in shown["description"], shown
    for name, extra in (("passkey", {"lengths": [256], "trials": 1}), ("ruler", {"tasks": ["niah_single_1"],
                                                                           "lengths": [256], "samples": 1}),
                        ("scrolls", {"datasets": ["quality"]})):
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": name, "chat_template": True, **extra}]})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail.startswith(f"tasks[0] ({name}).chat_template: true, but checkpoint tiny has no chat template")
        assert "chat_template.jinja" in detail and "tokenizer_config.json" in detail
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "ruler", "template": "chat",
                                                                   "tasks": ["niah_single_1"], "lengths": [256]}]})
    assert r.status_code == 422 and "(ruler).chat_template: true" in r.json()["detail"]  # template=chat is the same


def test_lengths_beyond_the_context_are_run_and_marked_in_results_and_the_leaderboard(served, tmp_path: Path) -> None:
    """A 128-token-context model asked for 96 and 192 tokens: both run; 192 is marked beyond
    its context with no scaling, and not with YaRN x2 (which reaches 256)."""
    from checkpoints.loading import load_model
    from evaluators import run_task
    from tests.helpers import tiny_model

    c, settings = served
    tiny_model(tmp_path / "short", max_position_embeddings=128)
    store = Store(settings.database)
    try:
        for rope in (None, "yarn:2"):
            loaded = load_model(tmp_path / "short", rope=rope)
            spec = {"name": "passkey", "lengths": [96, 192], "trials": 1}
            job = store.add_job(fingerprint="e" * 64, checkpoint="short", checkpoint_path=str(tmp_path / "short"),
                                tasks=[spec], rope=rope, backend="auto", priority=0)
            assert store.claim_next("test").id == job.id and store.finish(job.id, SUCCEEDED)
            entry = run_task(loaded, spec, task_dir(settings, job.id, "passkey"))
            assert entry["result"]["series"][0]["points"][1]["n"] == 1  # 192 ran
            assert entry["context"] == ({"trained": 128, "reach": 128, "rope_scaled": False, "beyond": [192]}
                                        if rope is None else
                                        {"trained": 128, "reach": 256, "rope_scaled": True, "beyond": []})
            store_results(settings, store, job.id, {"passkey": entry})
    finally:
        store.close()
    rows = {r["rope"]: r for r in c.get("/v1/leaderboard", params={"task": "passkey"}).json()["rows"]}
    assert rows["checkpoint"]["beyond_context"] == [192] and rows["checkpoint"]["trained_context"] == 128
    assert rows["yarn:2"]["beyond_context"] == []


def test_mrcr_and_graphwalks_are_refused_at_submission_without_data_or_template(served) -> None:
    """Missing parquet files: 422 with the paths looked for and where to get them; with the
    files there, a checkpoint without a chat template: 422 naming the option (MRCR's
    conversation needs one, and so does Graphwalks' default)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c, settings = served
    jobs = {"mrcr": {"name": "mrcr", "needles": [2]}, "graphwalks": {"name": "graphwalks", "sets": ["128k_and_shorter"]}}
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [jobs["mrcr"]]})
    detail = r.json()["detail"]  # paths relative to the data dir, as the API gives them
    assert r.status_code == 422 and "looked for mrcr/2needle.parquet and mrcr/2needle/2needle_*.parquet" in detail
    assert "huggingface.co/datasets/openai/mrcr" in detail
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [jobs["graphwalks"]]})
    assert r.status_code == 422 and "graphwalks/graphwalks_128k_and_shorter.parquet" in r.json()["detail"]
    (settings.data_dir / "mrcr").mkdir()
    (settings.data_dir / "graphwalks").mkdir()
    pq.write_table(pa.Table.from_pylist([{"prompt": "[]"}]), settings.data_dir / "mrcr" / "2needle.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "p"}]),
                   settings.data_dir / "graphwalks" / "graphwalks_128k_and_shorter.parquet")
    for name, spec in jobs.items():
        r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [spec]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith(f"tasks[0] ({name}).chat_template: true, but checkpoint tiny has no "
                                             "chat template")
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{**jobs["mrcr"], "chat_template": False}]})
    assert r.status_code == 422 and "chat_template" in r.text and "runs only through the checkpoint's chat" in r.text


def test_mrcr_v2_is_refused_at_submission_without_its_files_or_a_template(served) -> None:
    """The release's files missing: 422 naming each path looked for (relative to the data dir)
    and the download.sh call that fetches them; with them there, the default chat_template on a
    checkpoint without one: 422 naming the option."""
    c, settings = served
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "mrcr_v2"}]})
    detail = r.json()["detail"]
    assert r.status_code == 422 and detail.startswith("tasks[0] (mrcr_v2): missing data files: "), detail
    for length in ("upto_128K", "in_(524288,1048576)"):
        assert f"mrcr_v2/mrcr_v2p1_8needle_{length}_dynamic_fewshot_text_style_fast.csv" in detail
    assert "`./download.sh LCTX_DATA_DIR -n 8 -s -m`" in detail and str(settings.data_dir) not in detail
    (settings.data_dir / "mrcr_v2").mkdir()
    for length in ("upto_128K", "in_(524288,1048576)"):
        (settings.data_dir / "mrcr_v2" / f"mrcr_v2p1_8needle_{length}_dynamic_fewshot_text_style_fast.csv"
         ).write_text("queries,answer\n")
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [{"name": "mrcr_v2"}]})
    assert r.status_code == 422 and r.json()["detail"].startswith(
        "tasks[0] (mrcr_v2).chat_template: true, but checkpoint tiny has no chat template"), r.text


def test_thinking_is_refused_at_submission_where_the_template_has_no_switch(served, models: Path) -> None:
    """`thinking` on/off goes through the template's own switch: a checkpoint whose template
    has none is refused naming it and what it offers, one whose template reads
    enable_thinking is accepted; the job's setting reaches each task that set none."""
    import shutil

    c, _ = served
    for name, template in (("plain-chat", "{% for m in messages %}{{ m.content }}{% endfor %}"),
                           ("hybrid-chat", "{% for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking "
                                           "is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
                                           "{% endif %}")):
        shutil.copytree(models / "tiny", models / name)
        (models / name / "chat_template.jinja").write_text(template)
        assert c.post("/v1/checkpoints", json={"name": name, "path": str(models / name)}).status_code == 201
    task = {"name": "passkey", "lengths": [256], "trials": 1, "chat_template": True}
    r = c.post("/v1/jobs", json={"checkpoint": "plain-chat", "tasks": [{**task, "thinking": "off"}]})
    assert r.status_code == 422 and "checkpoint plain-chat" in r.json()["detail"], r.text
    assert "it offers thinking=default" in r.json()["detail"]
    r = c.post("/v1/jobs", json={"checkpoint": "plain-chat", "tasks": [task], "thinking": "on"})  # the job's setting
    assert r.status_code == 422 and "thinking=on" in r.json()["detail"], r.text
    r = c.post("/v1/jobs", json={"checkpoint": "hybrid-chat", "tasks": [{**task, "thinking": "off"}]})
    assert r.status_code == 202 and r.json()["tasks"][0]["thinking"] == "off", r.text
    r = c.post("/v1/jobs", json={"checkpoint": "hybrid-chat", "tasks": [{k: v for k, v in task.items()
                                                                         if k != "chat_template"}],
                                 "thinking": "off"})
    assert r.status_code == 422 and "set chat_template=true" in r.json()["detail"], r.text
