"""`clients.pull`: the hub through huggingface_hub's own cache with HF_HUB_OFFLINE
(a cache laid out as the library lays it out, built here), and GGUF refusals. The GGUF
conversion itself runs on the real SmolLM2 GGUF in tests/checkpoints/test_model_real.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from checkpoints.loading import load_model
from clients.pull import SOURCE_FILE, PullError, gguf_architecture, pull_gguf, pull_hub
from tests.checkpoints.hf_models import COMMIT, REPO, build_hf_model, hub_cache, hub_offline, tiny_gguf


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    folder = tmp_path_factory.mktemp("hf")
    model = build_hf_model(folder)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    return folder, model


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    hub_offline(monkeypatch)


def test_hub_pull_copies_data_files_records_commit_and_loads(tmp_path, tiny_model, offline) -> None:
    folder, hf = tiny_model
    cache = hub_cache(tmp_path / "cache", folder, extra={"modeling_evil.py": b"import os\n",
                                                        "pytorch_model.bin": b"pickle"})
    pulled = pull_hub(REPO, tmp_path / "roots" / "tiny", revision="main", cache_dir=cache)
    names = sorted(p.name for p in pulled.path.iterdir())
    assert "modeling_evil.py" not in names and "pytorch_model.bin" not in names
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", SOURCE_FILE} <= set(names)
    assert not any(p.is_symlink() for p in pulled.path.iterdir())
    source = json.loads((pulled.path / SOURCE_FILE).read_text())
    assert source["kind"] == "hub" and source["repo_id"] == REPO and source["commit"] == COMMIT
    assert source["revision"] == "main"
    loaded = load_model(pulled.path)
    ids = torch.tensor([[1, 5, 9, 17, 33]])
    with torch.no_grad():
        ours, _ = loaded.model(ids)
        theirs = hf(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert loaded.tokenizer.chat_template is not None  # read from chat_template.jinja


def test_hub_pull_by_commit(tmp_path, tiny_model, offline) -> None:
    cache = hub_cache(tmp_path / "cache", tiny_model[0])
    pulled = pull_hub(REPO, tmp_path / "tiny", revision=COMMIT, cache_dir=cache)
    assert pulled.source["commit"] == COMMIT


def test_hub_refusals(tmp_path, tiny_model, offline) -> None:
    cache = hub_cache(tmp_path / "cache", tiny_model[0], skip=("model.safetensors",),
                      extra={"pytorch_model.bin": b"pickle"})
    with pytest.raises(PullError, match="not a hub repository id"):
        pull_hub("no//such", tmp_path / "a", cache_dir=cache)
    with pytest.raises(PullError, match="not in the hub cache"):
        pull_hub("lctx-test/absent", tmp_path / "b", cache_dir=cache)
    with pytest.raises(PullError, match="is not a branch, tag or commit name"):
        pull_hub(REPO, tmp_path / "b", revision="../../../etc/passwd", cache_dir=cache)
    with pytest.raises(PullError, match=r"lacks \*\.safetensors weights.*pytorch_model\.bin"):
        pull_hub(REPO, tmp_path / "c", cache_dir=cache)
    assert not (tmp_path / "c").exists()
    good = hub_cache(tmp_path / "cache2", tiny_model[0])
    pull_hub(REPO, tmp_path / "d", cache_dir=good)
    with pytest.raises(PullError, match="already exists"):
        pull_hub(REPO, tmp_path / "d", cache_dir=good)


def test_hub_pull_of_an_unloadable_config_is_refused_and_leaves_nothing(tmp_path, tiny_model, offline) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model[0], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    cache = hub_cache(tmp_path / "cache", folder)
    with pytest.raises(PullError, match="unsupported model_type 'bert'"):
        pull_hub(REPO, tmp_path / "x", cache_dir=cache)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x*"))


def test_gguf_refusals(tmp_path) -> None:
    mamba = tiny_gguf(tmp_path / "m.gguf", "mamba")
    assert gguf_architecture(mamba) == "mamba"
    with pytest.raises(PullError, match="GGUF architecture 'mamba' is not supported; lctx converts llama"):
        pull_gguf(mamba, tmp_path / "out")
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(PullError, match="not a readable GGUF file"):
        pull_gguf(tmp_path / "bad.gguf", tmp_path / "out")
    with pytest.raises(PullError, match="does not exist"):
        pull_gguf(tmp_path / "absent.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()
