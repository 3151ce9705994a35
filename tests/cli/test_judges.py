"""A served judge as people run one (`lctx eval --judge URL`): a chat-style server without a
tokenizer folder or /tokenize (transformers serve, hosted APIs) is taken with token counts
estimated and said so, the one model it lists is the judge's, errors name the judge's own flags,
and the judgment cache knows when the judge's server changed (and can be ignored)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli.judges import judge_flags, judge_from_flags
from evaluators.judges import Judging, JudgmentCache
from tests.helpers import ThreadServer, reasoning_standin_app, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def _args(**given: object) -> argparse.Namespace:
    fields = {"judge_served_model": None, "judge_tokenizer": None, "judge_context": None,
              "judge_api_key_env": None, **given}
    return argparse.Namespace(**fields)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    checkpoint = tiny_checkpoint(tmp_path_factory.mktemp("judge") / "m", max_position_embeddings=1024)
    (checkpoint / "chat_template.jinja").write_text(TEMPLATE)
    with ThreadServer(reasoning_standin_app(checkpoint, name="tiny-judge", field=None)) as srv:
        yield srv


def test_a_chat_judge_needs_no_tokenizer_nor_its_name(server, tmp_path: Path) -> None:
    judge = judge_from_flags(f"{server.url}/v1", _args())  # no --judge-served-model, no --judge-tokenizer
    assert judge.source.spec.served_model == "tiny-judge"  # the one model the server lists
    assert judge.details["token_counts"] == "estimated" and judge.source.describe()["tokenizer"] == "estimated"
    assert judge.behaviour and len(judge.behaviour) == 64
    judging = Judging(judge, JudgmentCache(tmp_path / "cache"), max_new_tokens=4, thinking_budget=16)
    prompt = [{"role": "user", "content": "Is 2 + 2 = 4? Answer yes or no."}]
    first = judging.ask([prompt])[0]
    assert judging.asked == 1 and not first["cached"]
    again = Judging(judge, JudgmentCache(tmp_path / "cache"), max_new_tokens=4, thinking_budget=16)
    assert again.ask([prompt])[0]["cached"] and again.asked == 0  # the same judge: from the cache
    judge.behaviour = "0" * 64  # its server changed (another version, other settings)
    changed = Judging(judge, JudgmentCache(tmp_path / "cache"), max_new_tokens=4, thinking_budget=16)
    assert not changed.ask([prompt])[0]["cached"] and changed.asked == 1
    refreshed = Judging(judge, JudgmentCache(tmp_path / "cache", refresh=True), max_new_tokens=4, thinking_budget=16)
    assert not refreshed.ask([prompt])[0]["cached"] and refreshed.asked == 1  # --judge-refresh: asked again


def test_errors_name_the_judges_own_flags(server) -> None:
    # A model the server does not list (the stand-in answers any name): its context is not known.
    with pytest.raises(Exception, match="--judge-context") as caught:
        judge_from_flags(f"{server.url}/v1", _args(judge_served_model="nope"))
    assert "--context /" not in str(caught.value)
    assert judge_flags("none was given (--tokenizer / tokenizer); give --served-model NAME") == \
        "none was given (--judge-tokenizer); give --judge-served-model NAME"
