"""Demo checkpoints at start-up: `lctx serve` copies the committed demo models into the
first checkpoint root and registers them, so a newcomer can run a passkey job at once (a
fresh `lctx serve` doing so, and the real model registered beside them, is checked by
tests/service/test_readme_commands.py before it runs the README's blocks on that server)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checkpoints.fingerprint import inspect_checkpoint
from service.demo import MARKER, install_demo_checkpoints
from service.store import Store
from tests.helpers import tiny_checkpoint
from training.train import demo_checkpoints


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'lctx.db'}")
    s.create_all()
    yield s
    s.close()


def test_committed_demos_are_copied_and_registered_once(tmp_path: Path, store: Store) -> None:
    root = tmp_path / "models"
    first = install_demo_checkpoints(store, root)
    committed = demo_checkpoints()
    assert {d.name for d in first} == set(committed) and len(committed) >= 4
    assert {"demo-softmax", "demo-softpick", "demo-tda"} <= set(committed)
    for d in first:
        assert d.action == "copied" and (d.path / MARKER).is_file()
        row = store.get_checkpoint(d.name)
        assert row.path == str((root / d.name).absolute()) and row.variant == d.variant
        assert row.fingerprint == inspect_checkpoint(committed[d.name]).fingerprint
    again = install_demo_checkpoints(store, root)
    assert [d.action for d in again] == ["kept"] * len(first)
    assert len(store.list_checkpoints()) == len(first)


def test_changed_demo_weights_refresh_the_copy_and_the_fingerprint(tmp_path: Path, store: Store) -> None:
    source, root = tmp_path / "demo", tmp_path / "models"
    tiny_checkpoint(source / "softmax", seed=0)
    install_demo_checkpoints(store, root, source)
    before = store.get_checkpoint("demo-softmax").fingerprint
    shutil.rmtree(source / "softmax")
    tiny_checkpoint(source / "softmax", seed=1)  # the repository's demo was retrained
    (done,) = install_demo_checkpoints(store, root, source)
    assert done.action == "refreshed"
    after = store.get_checkpoint("demo-softmax").fingerprint
    assert after != before and after == inspect_checkpoint(source / "softmax").fingerprint


def test_a_users_own_folder_and_name_are_left_alone(tmp_path: Path, store: Store) -> None:
    source, root = tmp_path / "demo", tmp_path / "models"
    tiny_checkpoint(source / "softmax", seed=0)
    tiny_checkpoint(source / "tda", seed=0)
    mine = tiny_checkpoint(root / "demo-softmax", seed=5)  # not a demo copy: no marker
    weights = (mine / "model.safetensors").read_bytes()
    store.add_checkpoint("demo-tda", "/elsewhere/tda", "f" * 64, "tda", 1)
    by_name = {d.name: d for d in install_demo_checkpoints(store, root, source)}
    assert by_name["demo-softmax"].action.startswith("skipped") and "not an lctx demo copy" in by_name["demo-softmax"].action
    assert (mine / "model.safetensors").read_bytes() == weights and store.find_checkpoint("demo-softmax") is None
    assert by_name["demo-tda"].action.startswith("skipped") and "already registered" in by_name["demo-tda"].action
    assert store.get_checkpoint("demo-tda").path == "/elsewhere/tda"


def test_an_unwritable_root_is_a_warning_not_a_crash(tmp_path: Path, store: Store) -> None:
    source = tmp_path / "demo"
    tiny_checkpoint(source / "softmax", seed=0)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the root's parent folder should be")  # fails for root too, unlike chmod
    (done,) = install_demo_checkpoints(store, blocker / "models", source)
    assert done.action.startswith("skipped: cannot copy into") and "LCTX_DEMO_CHECKPOINTS=false" in done.action
    assert store.find_checkpoint("demo-softmax") is None

