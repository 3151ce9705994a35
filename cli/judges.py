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
                       "to it (with --judge URL)")
    group.add_argument("--judge-tokenizer", metavar="DIR", help="the served judge's tokenizer folder (its chat "
                       "template and think delimiters; default: the server's /tokenize)")
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


def open_judge(ref: str, args: argparse.Namespace, device: str = "cpu") -> Judge:
    """The judge `ref` names (a `name@identity` from earlier results must still be that
    model): a checkpoint folder, loaded on `device`, or an endpoint URL, probed. ValueError
    saying what to give otherwise."""
    from evaluators.judges import Judge, check_pin, split_ref

    name, _ = split_ref(ref)
    if name.startswith(URL_SCHEMES):
        from clients.endpoint.client import allowed_endpoint_hosts
        from clients.endpoint.engine import EndpointEngine, connect, served_identity
        from clients.endpoint.options import EndpointSpec
        from clients.endpoint.tokenizer import context_of

        model = getattr(args, "judge_served_model", None)
        if not model:
            raise ValueError(f"--judge {name}: an endpoint judge needs --judge-served-model NAME (the name its server "
                             "answers to)")
        tokenizer = getattr(args, "judge_tokenizer", None)
        context = getattr(args, "judge_context", None) or (context_of(tokenizer) if tokenizer else None)
        spec = EndpointSpec(base_url=name, served_model=model, tokenizer=tokenizer, context_length=context,
                            api_style="chat", api_key_env=getattr(args, "judge_api_key_env", None))
        served = connect(spec, allowed_endpoint_hosts())
        identity = served_identity(served.spec.base_url, served.spec.served_model)
        check_pin(ref, identity)
        judge = Judge(name, identity, "endpoint", served, EndpointEngine(served),
                      {"url": served.spec.base_url, "served_model": served.spec.served_model, "api_style": "chat"})
    else:
        from checkpoints.errors import CheckpointError
        from checkpoints.fingerprint import inspect_checkpoint
        from checkpoints.opening import open_model

        path = Path(name)
        if not path.is_dir():
            raise ValueError(f"--judge {name}: neither a checkpoint folder nor an endpoint URL (http://HOST:PORT/v1 "
                             "with --judge-served-model NAME)")
        try:
            identity = inspect_checkpoint(path).fingerprint
        except CheckpointError as e:
            raise ValueError(f"--judge {name}: {e}") from None
        check_pin(ref, identity)
        opened = open_model(path, device=device)
        judge = Judge(name, identity, "checkpoint", opened.loaded, opened.engine, {"checkpoint": path.resolve().name})
    judge.check()
    return judge
