"""One key-variable rule for the service and the CLI (clients/endpoint/keys.py): a variable of
lctx's service or one the process holds secrets in is never sent as a served model's key, from
`lctx eval --api-key-env`, `lctx score aa-lcr --judge-api-key-env`, `lctx endpoints probe`, an
EndpointSpec or the service's registration alike (issue #60, finding 10)."""

from __future__ import annotations

import argparse

import pytest

from checkpoints.errors import EndpointError
from cli.main import build_parser
from clients.endpoint.keys import key_variable_refusal, reserved_reason
from clients.endpoint.options import EndpointSpec, key_headers
from service.core.errors import InvalidRequest
from service.core.secrets import check_key_variable
from service.core.settings import own_variables

REFUSED = ["LCTX_API_TOKEN", "LCTX_DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "HOME", "PATH", "DATABASE_URL",
           "HF_TOKEN", "PGPASSWORD", "SSH_AUTH_SOCK"]
ADMITTED = ["LCTX_ENDPOINT_KEY_JUDGE", "VLLM_API_KEY", "OPENAI_API_KEY"]
URL = "http://127.0.0.1:9/v1"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("name", REFUSED)
def test_the_cli_refuses_what_the_service_refuses(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["score", "aa-lcr", "--pred-dir", "p", "--judge", URL, "--judge-served-model", "j",
                  "--judge-api-key-env", name],
                 ["eval", "--task", "aa_lcr", "--endpoint", URL, "--served-model", "m", "--judge", URL,
                  "--judge-served-model", "j", "--judge-api-key-env", name],
                 ["eval", "--task", "passkey", "--endpoint", URL, "--served-model", "m", "--api-key-env", name],
                 ["endpoints", "probe", URL, "--served-model", "m", "--api-key-env", name]):
        with pytest.raises(SystemExit) as exited:
            parse(*argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "api-key-env" in err and name in err and "not allowed" in err
    # the service refuses it even when the operator lists it
    with pytest.raises(InvalidRequest, match="not allowed"):
        check_key_variable(name, "", [name], own_variables())


@pytest.mark.parametrize("name", REFUSED)
def test_no_client_path_reads_a_reserved_variable(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "the-secret-value-123")
    with pytest.raises(EndpointError, match="not allowed"):
        key_headers(name)
    with pytest.raises(EndpointError, match="not allowed"):
        EndpointSpec(base_url=URL, served_model="m", tokenizer=None, context_length=None, api_key_env=name)


@pytest.mark.parametrize("name", ADMITTED)
def test_a_variable_of_its_own_is_admitted(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "key-123456789")
    assert key_variable_refusal(name) is None and reserved_reason(name) is None
    assert key_headers(name) == {"Authorization": "Bearer key-123456789"}
    assert parse("score", "aa-lcr", "--pred-dir", "p", "--judge", URL, "--judge-api-key-env", name
                 ).judge_api_key_env == name


def test_every_setting_of_the_service_is_reserved() -> None:
    assert all(reserved_reason(name) for name in own_variables())
