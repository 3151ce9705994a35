"""A served model's settings are declared once (`EndpointOptions`): both CLIs' flags, the API's
registration schema and `EndpointSpec` take the same defaults and bounds from it."""

from __future__ import annotations

import argparse

import pytest

from checkpoints.errors import EndpointError
from cli.endpoint_flags import ALL, FLAGS, endpoint_fields
from cli.main import build_parser
from clients.endpoint.options import EndpointOptions, EndpointSpec
from service.schemas import EndpointCreate


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_both_commands_default_to_the_declared_settings() -> None:
    declared = EndpointOptions(served_model="m").model_dump()
    run = parse("eval", "--endpoint", "http://127.0.0.1:1/v1", "--served-model", "m", "--task", "passkey")
    add = parse("endpoints", "add", "e", "http://127.0.0.1:1/v1", "--served-model", "m")
    assert endpoint_fields(run) == endpoint_fields(add) == declared
    assert set(FLAGS) == set(ALL) == set(EndpointOptions.model_fields)


def test_the_flags_reach_the_fields() -> None:
    add = parse("endpoints", "add", "e", "http://127.0.0.1:1/v1", "--served-model", "m", "--context", "4096",
                "--api-style", "chat", "--concurrency", "3", "--request-timeout", "2.5", "--retries", "0",
                "--api-key-env", "LCTX_ENDPOINT_KEY_A", "--tokenizer", "tok")
    fields = endpoint_fields(add)
    assert fields == {"served_model": "m", "tokenizer": "tok", "context_length": 4096, "api_style": "chat",
                      "concurrency": 3, "timeout_s": 2.5, "max_retries": 0, "api_key_env": "LCTX_ENDPOINT_KEY_A"}
    assert EndpointCreate(name="e", base_url="http://127.0.0.1:1/v1", **fields).concurrency == 3


@pytest.mark.parametrize(("flag", "value"), [("--concurrency", "0"), ("--concurrency", "2000"),
                                             ("--request-timeout", "0"), ("--retries", "-1"), ("--context", "8"),
                                             ("--api-key-env", "1BAD"), ("--concurrency", "many")])
def test_a_value_out_of_bounds_is_refused_by_the_parser_naming_the_flag(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["eval", "--endpoint", "http://127.0.0.1:1/v1", "--served-model", "m", "--task", "passkey"],
                 ["endpoints", "add", "e", "http://127.0.0.1:1/v1", "--served-model", "m"]):
        with pytest.raises(SystemExit):
            parse(*argv, flag, value)
        assert f"argument {flag}" in capsys.readouterr().err


def test_the_api_and_the_spec_refuse_what_the_flags_refuse() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        EndpointCreate(name="e", base_url="http://127.0.0.1:1/v1", served_model="m", concurrency=0)
    with pytest.raises(EndpointError, match="concurrency"):
        EndpointSpec(base_url="http://127.0.0.1:1/v1", served_model="m", tokenizer=None, context_length=None,
                     concurrency=0)
    with pytest.raises(EndpointError, match="api_style"):
        EndpointSpec(base_url="http://127.0.0.1:1/v1", served_model="m", tokenizer=None, context_length=None,
                     api_style="edit")  # type: ignore[arg-type]
