"""lctx models as an `lm_eval` model, registered under the name "lctx", so that
`lm_eval.simple_evaluate(model="lctx", model_args={"checkpoint": DIR, "rope": "yarn:4"},
tasks=[...])` runs any lm-eval task on a lctx checkpoint (import this module first:
lm-eval's own command line has no plugin discovery; `lctx lm-eval` does it).

The three request types map onto the batched engine (`checkpoints.engine`): each
lm-eval call is one list of requests, decoded in batches over a ragged KV cache;
contexts longer than the model's budget keep their end."""

from __future__ import annotations

import logging
from typing import Any

import lm_eval.models  # noqa: F401 - lm-eval fills its registry only while it is empty: fill it before adding ours
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from checkpoints.engine import DEFAULT_MAX_BATCH, GenerateRequest, LoglikelihoodRequest
from checkpoints.engine_options import EngineOptions
from checkpoints.loading import LoadedModel
from checkpoints.opening import open_model

log = logging.getLogger("lctx.lm_eval")
DEFAULT_GEN_TOKENS = 256


@register_model("lctx")
class LctxLM(LM):
    """model_args: checkpoint (required), rope, backend, dtype, device, max_length, and
    batch_size (the engine's most rows decoded at once; its memory budget bounds it too) and
    memory_mb (that budget, as `lctx eval --memory-mb`). The checkpoint is opened as `lctx
    eval` opens it (`checkpoints.opening.open_model`)."""

    def __init__(
        self,
        checkpoint: str | None = None,
        rope: str | None = None,
        backend: str = "auto",
        dtype: str | None = None,
        device: str | None = None,
        max_length: int | str | None = None,
        loaded: LoadedModel | None = None,
        batch_size: Any = None,
        memory_mb: int | str | None = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        rows = int(batch_size) if str(batch_size or "").isdigit() and int(batch_size) > 0 else DEFAULT_MAX_BATCH
        options = EngineOptions(max_batch=rows, memory_mb=int(memory_mb) if memory_mb else None)
        if loaded is None:
            if not checkpoint:
                raise ValueError("the lctx lm-eval model needs model_args checkpoint=DIR")
            opened = open_model(checkpoint, options, rope=rope or None, backend=backend or "auto",
                                dtype=dtype or None, device=device or "cpu")
            loaded, self.engine = opened.loaded, opened.engine
        else:
            self.engine = options.engine(loaded)
        self.loaded = loaded
        self.tok = loaded.tokenizer
        self.max_length = int(max_length) if max_length else loaded.config.effective_context
        if unused:
            log.warning("lctx lm-eval model ignores arguments %s", sorted(unused))

    # --- tokens --------------------------------------------------------------

    def prefix(self) -> list[int]:
        """What an empty context starts from: BOS, else the first EOS id."""
        if self.tok.bos_id is not None:
            return [self.tok.bos_id]
        return [self.tok.eos_ids[0]] if self.tok.eos_ids else []

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context ids (with BOS) and continuation ids, split where lm-eval's HF model splits:
        trailing spaces of the context move to the continuation."""
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation, context = context[-n_spaces:] + continuation, context[:-n_spaces]
        whole = self.tok.encode(context + continuation, add_special_tokens=False)
        ctx = self.tok.encode(context, add_special_tokens=False)
        return self.prefix() + whole[: len(ctx)], whole[len(ctx):]

    # --- the three request types, each one batched call of the engine ----------

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        reqs = []
        for req in requests:
            context, continuation = req.args
            ctx, cont = self.encode_pair(context, continuation)
            keep = max(1, self.max_length - len(cont))
            reqs.append(LoglikelihoodRequest(ctx[-keep:], cont))
        with tqdm(total=len(reqs), disable=disable_tqdm, desc="loglikelihood") as bar:
            return self.engine.loglikelihood(reqs, done=lambda *_: bar.update())

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text as lm-eval's disjoint rolling windows, every window one log-likelihood request."""
        windows: list[LoglikelihoodRequest] = []
        owner: list[int] = []
        prefix = self.prefix()
        for i, req in enumerate(requests):
            (text,) = req.args
            ids = self.tok.encode(text, add_special_tokens=False)
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    ids, prefix_token=prefix[0] if prefix else ids[0], max_seq_len=self.max_length, context_len=1)):
                windows.append(LoglikelihoodRequest(ctx, cont))
                owner.append(i)
        totals = [0.0] * len(requests)
        with tqdm(total=len(windows), disable=disable_tqdm, desc="loglikelihood_rolling") as bar:
            for i, (logp, _) in zip(owner, self.engine.loglikelihood(windows, done=lambda *_: bar.update()),
                                    strict=True):
                totals[i] += logp
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        reqs = []
        for req in requests:
            context, kwargs = req.args
            kwargs = dict(kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.pop("max_gen_toks", DEFAULT_GEN_TOKENS))
            if kwargs.get("do_sample"):
                log.warning("lctx decodes greedily; do_sample=True is ignored")
            ids = self.prefix() + self.tok.encode(context, add_special_tokens=False)
            keep = max(1, self.max_length - max_new)
            reqs.append(GenerateRequest(ids[-keep:], max_new_tokens=max_new, stop=tuple(until)))
        with tqdm(total=len(reqs), disable=disable_tqdm, desc="generate_until") as bar:
            return [g.text for g in self.engine.generate_until(reqs, done=lambda *_: bar.update())]
