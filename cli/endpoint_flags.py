"""The flags of a served model's settings, made from their one declaration
(`clients.endpoint.options.EndpointOptions`): `lctx endpoints add`, `lctx endpoints probe` and
`lctx eval --endpoint` take the same flags with the same help, defaults and bounds (a value out
of bounds is refused by argparse, naming the flag, before anything is sent)."""

from __future__ import annotations

import argparse
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from clients.endpoint.keys import key_variable_refusal
from clients.endpoint.options import API_STYLES, EndpointOptions

# field -> its flag (the field's own name with dashes, where the flag is not shorter)
FLAGS = {"served_model": "--served-model", "tokenizer": "--tokenizer", "context_length": "--context",
         "api_style": "--api-style", "concurrency": "--concurrency", "timeout_s": "--request-timeout",
         "max_retries": "--retries", "api_key_env": "--api-key-env"}
METAVARS = {"served_model": "NAME", "tokenizer": "DIR", "context_length": "TOKENS", "concurrency": "N",
            "timeout_s": "SECONDS", "max_retries": "N", "api_key_env": "NAME"}
ALL = tuple(FLAGS)
PROBE = ("served_model", "tokenizer", "api_style", "api_key_env")  # what a probe asks with


def _checked(field: str) -> Any:
    """An argparse type: the text as the field's type, within its bounds (pydantic's lax mode
    reads "8" as 8)."""
    info = EndpointOptions.model_fields[field]
    adapter = TypeAdapter(Annotated[(info.annotation, *info.metadata)])

    def check(text: str) -> Any:
        try:
            value = adapter.validate_python(text)
        except ValidationError as e:
            raise argparse.ArgumentTypeError("; ".join(err["msg"] for err in e.errors())) from None
        if field == "api_key_env" and (why := key_variable_refusal(value, FLAGS[field])):
            raise argparse.ArgumentTypeError(why)  # the service's rule (clients/endpoint/keys.py), here too
        return value

    return check


def add_endpoint_flags(group: argparse._ActionsContainer, fields: tuple[str, ...] = ALL,
                       help_of: dict[str, str] | None = None, required: tuple[str, ...] = ()) -> None:
    """The flags of `fields`, each with its field's description and default; `help_of`
    replaces a description where a command means something narrower."""
    for field in fields:
        info = EndpointOptions.model_fields[field]
        text = (help_of or {}).get(field) or info.description or ""
        default = None if info.is_required() else info.default
        if default is not None:
            text += f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
        kwargs: dict[str, Any] = {"dest": field, "help": text.replace("%", "%%"), "default": default}
        if field == "api_style":
            kwargs["choices"] = API_STYLES
        else:
            kwargs.update(type=_checked(field), metavar=METAVARS[field])
        if field in required:
            kwargs["required"] = True
        group.add_argument(FLAGS[field], **kwargs)


def endpoint_fields(args: argparse.Namespace, fields: tuple[str, ...] = ALL) -> dict[str, Any]:
    """The parsed flags as `EndpointOptions` fields (what the API and `EndpointSpec` take)."""
    return {field: getattr(args, field) for field in fields}
