"""Any config.json to a `ModelConfig`: lctx's own format (`checkpoints.config`) or a
Hugging Face family's (`checkpoints.families`). It sits above both, so the config stays
a leaf that the families read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.config import OWN_MODEL_TYPE, ModelConfig, own_config
from checkpoints.errors import ConfigError
from checkpoints.families import from_hf


def read_config(raw: dict[str, Any]) -> ModelConfig:
    """A config dict of our own format (model_type "lctx" or none) or a Hugging Face one."""
    if raw.get("model_type", OWN_MODEL_TYPE) == OWN_MODEL_TYPE:
        return own_config(raw)
    return from_hf(raw)


def load_config(path: str | Path) -> ModelConfig:
    """The config.json of a checkpoint directory (or the file itself); ConfigError naming
    the file for one that is missing, not JSON or not a config."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no config.json at {path}; a checkpoint directory needs config.json")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    try:
        return read_config(raw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
