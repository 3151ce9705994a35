"""The server dialects read the documented answer shapes: our prompt tokens' log-probabilities
(the first None) and whether each was the top choice; a shape that does not match is an
EndpointError, never a guess. The servers themselves (stand-ins of vLLM and SGLang,
`transformers serve`): test_engine_servers.py."""

from __future__ import annotations

import pytest

from checkpoints.errors import EndpointError
from clients.endpoint.dialects import DIALECTS, SCORING_METHODS, dialect, thinking_fields

IDS = [7, 8, 9]


class Chars:
    """A tokenizer whose token i is the character chr(i + 90)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i + 90) for i in ids)


ANSWERS = {
    "vllm": {"choices": [{"prompt_logprobs": [None, {"8": {"logprob": -1.0, "rank": 1}},
                                              {"9": {"logprob": -2.0, "rank": 3}, "4": {"logprob": -0.5, "rank": 1}}]}]},
    "sglang": {"meta_info": {"input_token_logprobs": [[None, 7, "a"], [-1.0, 8, "b"], [-2.0, 9, "c"]],
                             "input_top_logprobs": [None, [[-1.0, 8, "b"]], [[-0.5, 4, "x"]]]}},
    "echo": {"choices": [{"logprobs": {"token_logprobs": [None, -1.0, -2.0],
                                       "top_logprobs": [None, {"b": -1.0}, {"x": -0.5}]}}]},
}


@pytest.mark.parametrize("name", SCORING_METHODS)
def test_each_dialect_reads_its_documented_answer(name: str) -> None:
    row = dialect(name)
    path, body, root = row.request("m", IDS)
    assert path.startswith("/") and isinstance(body, dict) and isinstance(root, bool)
    assert row.read(ANSWERS[name], IDS, Chars()) == ([None, -1.0, -2.0], [False, True, False])


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_an_answer_for_other_tokens_is_refused(name: str) -> None:
    with pytest.raises(EndpointError):
        dialect(name).read(ANSWERS[name], [7, 8, 10], Chars())


def test_the_table_is_the_probe_order_and_names_are_checked() -> None:
    assert SCORING_METHODS == tuple(d.name for d in DIALECTS) == ("vllm", "sglang", "echo")
    with pytest.raises(EndpointError, match="no prompt scoring method"):
        dialect("tgi")
    assert thinking_fields("off") == {"chat_template_kwargs": {"enable_thinking": False}}
    assert thinking_fields("high") == {"reasoning_effort": "high"} and thinking_fields("default") == {}
