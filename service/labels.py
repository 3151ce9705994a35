"""Labels people read, computed once by the server: the API answers them beside the data
(`rope_label` of a job, a checkpoint, a schedule's suite) and the dashboard shows them as
given, so the pages, the leaderboard and the CLI cannot spell one setting two ways."""

from __future__ import annotations

from typing import Any


def number(value: float) -> str:
    """4.0 -> "4", 2.5 -> "2.5", 500000.0 -> "500000" (as people write factors and thetas)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def rope_label(rope: str | dict[str, Any] | None) -> str:
    """A RoPE setting as people write it: `checkpoint` (the checkpoint's own), `none`,
    `yarn:4`, or a dict as `yarn:4 beta_fast=16` (keys sorted)."""
    if rope is None or (isinstance(rope, str) and rope.strip().lower() in ("", "checkpoint")):
        return "checkpoint"
    if isinstance(rope, str):
        return rope.strip().lower()
    raw = dict(rope)
    kind = str(raw.pop("rope_type", None) or raw.pop("type", None) or "default")
    factor = raw.pop("factor", None)
    head = f"{kind}:{number(factor)}" if isinstance(factor, int | float) and not isinstance(factor, bool) else kind
    return " ".join([head] + [f"{k}={raw[k]}" for k in sorted(raw)])


# A served model's RoPE is the server's: lctx neither applies nor knows it.
SERVED_ROPE = "server's"


def job_rope_label(rope: str | dict[str, Any] | None, endpoint: str | None) -> str:
    """A job's RoPE label: the server's own for a job on a served model (never `checkpoint`,
    which would say lctx ran the checkpoint's own scaling), else `rope_label`."""
    return SERVED_ROPE if endpoint else rope_label(rope)


def own_rope_label(rope: dict[str, Any] | None) -> str | None:
    """A checkpoint's own RoPE (`rope_theta` and its scaling) as `yarn:4 (θ=10000)`."""
    if rope is None:
        return None
    scaling = dict(rope)
    theta = scaling.pop("rope_theta", None)
    return rope_label(scaling) + (f" (θ={number(theta)})" if isinstance(theta, int | float) else "")
