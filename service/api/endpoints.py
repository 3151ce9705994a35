"""/v1/endpoints: served models (OpenAI-compatible servers) registered like checkpoints:
the URL checked (scheme, allowed host), the tokenizer folder (if given; else the server's
/tokenize) confined to the checkpoint roots, the server probed (the model listed or
answering a one-token request; token prompts, how it scores prompts, /tokenize, version) and what it said recorded, with the service's secrets masked. The API key never
passes through here: only the name of the variable that holds it on the workers, which
must be one the operator set aside for endpoint keys (service/core/secrets.py)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response, status
from fastapi.concurrency import run_in_threadpool

from checkpoints.errors import CheckpointError, EndpointError, NotAServer
from clients.endpoint.client import check_base_url
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import probe, registered_context
from clients.endpoint.tokenizer import context_of
from service.api.deps import NameParam, Read, SettingsDep, StoreDep, Write
from service.core.errors import InvalidRequest
from service.core.paths import confine
from service.core.secrets import masked
from service.schemas import EndpointCreate, EndpointOut, errors
from service.store import EndpointRow, now
from service.views import endpoint_out

router = APIRouter(prefix="/v1/endpoints", tags=["endpoints"], responses=errors(400, 403, 404, 409))
log = logging.getLogger("lctx.api")

# The one answer for whatever is at the URL when it is not an OpenAI-compatible server: no answer, a
# port that speaks something else, an HTTP server answering an error. Naming which (refused, reset,
# 401, 404) would make registration a port scanner of the service's hosts for anyone holding the
# token: the detail goes to the server's log, the answer names no URL and no port.
NOT_A_SERVER = ("not an OpenAI-compatible server there: GET <base_url>/models did not answer with a model list. "
                "Check that the server is running, that base_url is its API root (ending in /v1) and, if it needs a "
                "key, api_key_env; `lctx endpoints probe URL` run where the server is says what it answers "
                "(this service's log has what it met)")


@router.post("", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=EndpointOut)
async def register_endpoint(body: EndpointCreate, store: StoreDep, settings: SettingsDep) -> EndpointOut:
    """Check the URL and the tokenizer, ask the server what it serves and supports, record it."""
    settings.check_endpoint_key(body.api_key_env)
    tokenizer = str(confine(body.tokenizer, settings.roots, "tokenizer")) if body.tokenizer else None
    try:
        url = check_base_url(body.base_url, settings.endpoint_host_list)
        context = body.context_length or (context_of(tokenizer) if tokenizer else None)  # before the probe: checked
        spec = EndpointSpec(base_url=url, served_model=body.served_model, tokenizer=tokenizer,
                            context_length=context, api_style=body.api_style, concurrency=body.concurrency,
                            timeout_s=body.timeout_s, max_retries=body.max_retries, api_key_env=body.api_key_env)
        capabilities = await run_in_threadpool(probe, spec)
        context, _ = registered_context(context, tokenizer, capabilities)
        if context is None:
            raise EndpointError(f"the server at {url} does not say the context of {body.served_model!r} "
                                "(no max_model_len): give context_length")
    except NotAServer as e:
        log.warning("endpoint %r: %s", body.name, e)
        raise InvalidRequest(NOT_A_SERVER) from None
    except (EndpointError, CheckpointError) as e:
        raise InvalidRequest(str(e)) from e
    row = EndpointRow(name=body.name, base_url=url, served_model=body.served_model, api_style=body.api_style,
                      tokenizer=tokenizer, context_length=context, concurrency=body.concurrency,
                      timeout_s=body.timeout_s, max_retries=body.max_retries, api_key_env=body.api_key_env,
                      capabilities=masked(capabilities.to_dict(), settings.secrets()), created_at=now())
    return endpoint_out(store.add_endpoint(row), settings)


@router.get("", dependencies=Read, response_model=list[EndpointOut])
def list_endpoints(store: StoreDep, settings: SettingsDep) -> list[EndpointOut]:
    return [endpoint_out(r, settings) for r in store.list_endpoints()]


@router.get("/{name}", dependencies=Read, response_model=EndpointOut)
def get_endpoint(name: NameParam, store: StoreDep, settings: SettingsDep) -> EndpointOut:
    return endpoint_out(store.get_endpoint(name), settings)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, dependencies=Write)
def delete_endpoint(name: NameParam, store: StoreDep) -> Response:
    """Forget the registration; past jobs and their results are kept."""
    store.delete_endpoint(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
