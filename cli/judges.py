"""The judges of `lctx eval` and `lctx score` (evaluators/judges.py), without the service: a
checkpoint folder, run on lctx's engine, or an OpenAI-compatible endpoint's URL with the
served model's name (chat style). What identifies the judge (the checkpoint's fingerprint,
the URL and model) is added to the task's `judge` option (`name@identity`), so results,
their configuration hash and the output folder's samples never mix two judges. Heavy modules
are imported when a judge is opened, never with `lctx --help`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaluators.judges import Judge

URL_SCHEMES = ("http://", "https://")


def add_judge_flags(group: argparse._ActionsContainer) -> None:
    """How to reach a served judge named by its URL (`--judge http://HOST:PORT/v1`)."""
    group.add_argument("--judge-served-model", metavar="NAME", help="the judge's model name as its server answers "
                       "to it (with --judge URL; default: the one model the server lists)")
    group.add_argument("--judge-tokenizer", metavar="DIR", help="the served judge's tokenizer folder (its chat "
                       "template and think delimiters; default: the server's /tokenize where it has one, else "
                       "token counts estimated at 4 characters a token, as results then say)")
    group.add_argument("--judge-refresh", action="store_true", help="ask the judge every prompt again: take no "
                       "verdict from the cache of earlier runs (the new replies are cached)")
    group.add_argument("--judge-context", metavar="TOKENS", type=int, help="the served judge's context (default: its "
                       "tokenizer folder's config.json or the server's)")
    group.add_argument("--judge-api-key-env", metavar="NAME", type=_key_variable, help="NAME of the environment "
                       "variable holding the judge server's API key (never the key; never a variable of lctx's service "
                       "or one the process holds secrets in: the service's rule)")


def _key_variable(text: str) -> str:
    """An argparse type: a variable name the key rule admits (clients/endpoint/keys.py, the one
    the service applies to endpoint keys)."""
    from clients.endpoint.keys import key_variable_refusal

    if (why := key_variable_refusal(text, "--judge-api-key-env")) is not None:
        raise argparse.ArgumentTypeError(why)
    return text


# The endpoint flags' names in messages of the shared endpoint code, and the judge's flags they stand for here.
JUDGE_FLAGS = {"--tokenizer / tokenizer": "--judge-tokenizer", "--context / context_length": "--judge-context",
               "--served-model": "--judge-served-model", "--api-key-env": "--judge-api-key-env"}


def judge_flags(message: str) -> str:
    """A message of the endpoint code with the flags a judge is given by (`--judge-tokenizer`)."""
    import re

    for flag, judge_flag in JUDGE_FLAGS.items():
        message = re.sub(r"(?<![\w-])" + re.escape(flag), judge_flag, message)
    return message


def only_served_model(url: str, args: argparse.Namespace) -> str:
    """The model a judge's server lists when it lists one (`--judge-served-model` left out);
    ValueError naming them when it lists several, or none."""
    from checkpoints.errors import EndpointError
    from clients.endpoint.client import allowed_endpoint_hosts, check_base_url
    from clients.endpoint.probe import listed_models

    try:
        names = listed_models(check_base_url(url, allowed_endpoint_hosts()), getattr(args, "judge_api_key_env", None))
    except EndpointError as e:
        raise ValueError(f"--judge {url}: {judge_flags(str(e))}") from None
    if len(names) != 1:
        raise ValueError(f"--judge {url}: the server lists {len(names)} models ({', '.join(names[:10]) or 'none'}); "
                         "give the judge's with --judge-served-model NAME")
    return names[0]


def judge_from_flags(ref: str, args: argparse.Namespace, device: str = "cpu") -> Judge:
    """The judge `ref` names (a `name@identity` from earlier results must still be that
    model), opened by `evaluators.judges.open_judge`: a checkpoint folder, loaded on `device`,
    or an endpoint URL with the judge's flags, probed. ValueError saying what to give
    otherwise; the endpoint code's messages name the judge's flags."""
    from checkpoints.errors import CheckpointError, EndpointError
    from evaluators.judges import open_judge, split_ref

    name, _ = split_ref(ref)
    if name.startswith(URL_SCHEMES):
        from clients.endpoint.client import allowed_endpoint_hosts
        from clients.endpoint.engine import EndpointTarget
        from clients.endpoint.options import EndpointSpec
        from clients.endpoint.tokenizer import context_of

        try:
            model = getattr(args, "judge_served_model", None) or only_served_model(name, args)
            tokenizer = getattr(args, "judge_tokenizer", None)
            context = getattr(args, "judge_context", None) or (context_of(tokenizer) if tokenizer else None)
            spec = EndpointSpec(base_url=name, served_model=model, tokenizer=tokenizer, context_length=context,
                                api_style="chat", api_key_env=getattr(args, "judge_api_key_env", None))
            return open_judge(name, ref, EndpointTarget(spec, tuple(allowed_endpoint_hosts())),
                              {"url": spec.base_url, "served_model": spec.served_model, "api_style": "chat"})
        except EndpointError as e:
            raise EndpointError(judge_flags(str(e))) from None
    from checkpoints.opening import CheckpointTarget

    path = Path(name)
    if not path.is_dir():
        raise ValueError(f"--judge {name}: neither a checkpoint folder nor an endpoint URL (http://HOST:PORT/v1 "
                         "with --judge-served-model NAME)")
    try:
        return open_judge(name, ref, CheckpointTarget(path, device), {"checkpoint": path.resolve().name})
    except CheckpointError as e:
        raise ValueError(f"--judge {name}: {e}") from None
