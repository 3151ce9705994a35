"""The context check counts the thinking budget wherever thinking can be on (issue #60, finding
3): a needle at 32k with `thinking: on, thinking_budget: 131072` on a served model of context
32,768 was accepted, sent nothing, recorded every sample beyond the context and "succeeded" at
accuracy 0. Now refused at submission, naming both budgets; a budget that fits is accepted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.store import EndpointRow
from tests.helpers import chat_checkpoint, make_settings

NEEDLE = {"name": "needle", "lengths": [32_000], "depths": [50], "trials": 1, "max_new_tokens": 10}
THINKING_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<think>"
                     "{% endif %}")  # its `<think>`/`</think>` tags mark thinking
THINKING_TEMPLATE += "{% if false %}</think>{% endif %}"


@pytest.fixture
def api(tmp_path: Path):
    chat_checkpoint(tmp_path / "models" / "tiny", max_position_embeddings=1024)
    shutil.copytree(tmp_path / "models" / "tiny", tmp_path / "models" / "thinker")
    (tmp_path / "models" / "thinker" / "chat_template.jinja").write_text(THINKING_TEMPLATE)
    settings = make_settings(tmp_path, max_length=200_000)
    app = create_app(settings)
    with TestClient(app) as c:
        for name in ("served", "thinker-served"):
            app.state.store.add_endpoint(EndpointRow(
                name=name, base_url="http://127.0.0.1:9/v1", served_model="m", api_style="chat",
                tokenizer=str(tmp_path / "models" / ("thinker" if name == "thinker-served" else "tiny")),
                context_length=32_768, concurrency=1, timeout_s=5.0, max_retries=0, api_key_env=None,
                capabilities={}))
        for name in ("tiny", "thinker"):
            assert c.post("/v1/checkpoints", json={"name": name, "path": name}).status_code == 201
        yield c


def test_a_thinking_budget_past_a_served_context_is_refused_naming_both_budgets(api) -> None:
    r = api.post("/v1/jobs", json={"endpoint": "served", "tasks": [{**NEEDLE, "thinking": "on",
                                                                   "thinking_budget": 131_072}]})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    for needle in ("thinking_budget of 131072", "max_new_tokens 10", "32768", "163082", "at most 758"):
        assert needle in detail, (needle, detail)
    fits = api.post("/v1/jobs?dry_run=true", json={"endpoint": "served", "tasks": [
        {**NEEDLE, "thinking": "on", "thinking_budget": 758}]})
    assert fits.status_code == 200, fits.text
    # left at default, the budget counts on a model whose template marks thinking, not on one that has none
    default = {**NEEDLE, "thinking_budget": 4096}
    assert api.post("/v1/jobs?dry_run=true", json={"endpoint": "served", "tasks": [default]}).status_code == 200
    r = api.post("/v1/jobs", json={"endpoint": "thinker-served", "tasks": [default]})
    assert r.status_code == 422 and "thinking default on a model that thinks" in r.text, r.text
    off = {**default, "thinking": "off"}
    assert api.post("/v1/jobs?dry_run=true", json={"endpoint": "thinker-served", "tasks": [off]}).status_code == 200


def test_a_checkpoint_sample_that_fits_until_its_thinking_budget_is_added_is_refused(api) -> None:
    task = {**NEEDLE, "lengths": [1000]}  # 1,010 tokens of a 1,024-token context, then 2,048 of thinking
    r = api.post("/v1/jobs", json={"checkpoint": "thinker", "tasks": [task]})
    assert r.status_code == 422 and "checkpoint thinker's context of 1024" in r.text, r.text
    assert "thinking_budget of 2048" in r.text and "max_new_tokens 10" in r.text
    assert api.post("/v1/jobs?dry_run=true", json={"checkpoint": "tiny", "tasks": [task]}).status_code == 200
    assert api.post("/v1/jobs?dry_run=true", json={"checkpoint": "thinker", "tasks": [
        {**task, "thinking_budget": 14}]}).status_code == 200
    beyond = {**task, "lengths": [2000]}  # past the context as asked: a context-extension measurement, as before
    assert api.post("/v1/jobs?dry_run=true", json={"checkpoint": "thinker", "tasks": [beyond]}).status_code == 200
