"""The HTTP side of a served model: which URLs may be called, and the key masked in answers."""

from __future__ import annotations

import httpx
import pytest

from checkpoints.errors import EndpointError
from clients.endpoint.client import KEY_MASK, check_base_url, key_forms, scrub


def test_url_checks() -> None:
    assert check_base_url("http://127.0.0.1:8001/v1/", ["127.0.0.1"]) == "http://127.0.0.1:8001/v1"
    assert check_base_url("https://gpu-node:443/v1", ["*"]) == "https://gpu-node:443/v1"
    for bad in ("file:///etc/passwd", "http://user:pw@127.0.0.1/v1", "http://10.0.0.1/v1", "http:///v1",
                "http://127.0.0.1:99999/v1", "http://127.0.0.1:0/v1", "http://127.0.0.1/v1?x=1"):
        with pytest.raises(EndpointError):
            check_base_url(bad, ["127.0.0.1", "localhost"])


def test_the_key_is_masked_in_body_and_headers_and_a_short_one_is_no_secret() -> None:
    key = 'sk-"secret"-12345'
    answer = httpx.Response(200, headers={"x-echo": f"Bearer {key}"}, request=httpx.Request("GET", "http://h/v1"),
                            content=('{"model": "' + key.replace('"', '\\"') + '"}').encode())
    masked = scrub(answer, key_forms(key))
    assert key not in masked.text and 'secret' not in masked.headers["x-echo"]
    assert KEY_MASK in masked.text and KEY_MASK in masked.headers["x-echo"]
    assert key_forms("EMPTY") == []
