"""What a registration records of the probe's answer (the servers themselves:
test_engine_servers.py)."""

from __future__ import annotations

from clients.endpoint.probe import Capabilities, registered_context


def test_the_registered_context_says_where_it_came_from() -> None:
    caps = Capabilities(models=["m"], token_prompts=False, prompt_logprobs=False, max_model_len=4096)
    assert registered_context(None, None, caps) == (4096, "the server's max_model_len")
    assert registered_context(8192, None, caps) == (8192, "given")
    assert registered_context(None, None, Capabilities(["m"], False, False)) == (None, "not said")
