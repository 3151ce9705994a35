"""The served model's tokenizer folder: one that does not exist is named, for the tokenizer
and for the context its config.json gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoints.errors import EndpointError
from clients.endpoint.tokenizer import context_of, load_endpoint_tokenizer


def test_a_tokenizer_folder_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tokenizer"
    for read in (context_of, load_endpoint_tokenizer):
        with pytest.raises(EndpointError, match="no-such-tokenizer does not exist"):
            read(missing)
