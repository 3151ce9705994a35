"""A small model that thinks: a passkey demo checkpoint taught to write a think block
before its answer, the way hybrid reasoning models (Qwen3) do, with a chat template whose
`enable_thinking` switch writes an empty block when thinking is off. The test model of
lctx's reasoning path (docs/protocols/reasoning.md): with thinking on it spends tokens in a
block, then answers; with thinking off it answers at once; both answers are the key.

    python -m training.thinking --base demo/checkpoints/softmax --out demo/thinking

Rows are the passkey protocol's prompt in the template, then (half of them) a block of
thinking (a fixed sentence: the key is not in it, so the answer is retrieved from the
needle either way), then the answer; the other half carry the template's empty block in
the prompt and the answer alone."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from checkpoints.loading import load_model, save_model
from checkpoints.passkey_text import KEY_RANGE, passkey_prompt
from checkpoints.tokenizer import CHAT_TEMPLATE_FILE, ByteTokenizer
from training.synthetic import SyntheticText
from training.train import weighted_loss

# Qwen3's switch, written for a byte-level model: the user message, then the generation prompt,
# then with enable_thinking false an empty think block.
# Newlines are written as expressions: transformers (and lctx) render templates with trim_blocks,
# which drops a newline that follows a block tag.
TEMPLATE = ("{% for message in messages %}{% if message.role == 'user' %}{{ message.content }}{% endif %}"
            "{% endfor %}{% if add_generation_prompt %}{{ '\\n' }}{% if enable_thinking is defined and "
            "enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")
EMPTY_BLOCK = "<think>\n\n</think>\n\n"
# Share of rows that are the base training's dense copying rows (needles every few dozen bytes):
# they keep the retrieval the base model learnt while the new rows teach the block.
DENSE_SHARE = 0.3


THOUGHT = "<think>\nThe pass key is hidden in the text above. I will find it and answer.\n</think>\n\n"


def row(rng: random.Random, tok: ByteTokenizer, seq_len: int) -> tuple[list[int], list[tuple[int, int]], int]:
    """(ids, spans of tokens copied from the needle, tokens of prompt whose prediction is not
    learnt) of one training row: the empty block of thinking off is part of the prompt the
    template writes, never something the model learns to write itself."""
    key = rng.randint(*KEY_RANGE)
    thinks = rng.random() < 0.5
    answer = f"{key}."
    fixed = len(passkey_prompt(key, 0, 0)) + 2 + len(THOUGHT) + len(answer) + 1
    garbage = rng.randint(0, max(0, seq_len - fixed))
    prompt = passkey_prompt(key, garbage, rng.randint(0, garbage)) + "\n" + ("" if thinks else EMPTY_BLOCK)
    text = prompt + (THOUGHT if thinks else "") + answer
    ids = tok.encode(text) + tok.eos_ids
    return ids, [(1 + len(text) - len(answer), len(str(key)))], 0 if thinks else 1 + len(prompt)


def dense(curriculum: SyntheticText) -> tuple[list[int], list[tuple[int, int]], int]:
    """A dense copying row of the base training (nothing of it masked)."""
    r = curriculum.dense_row()
    return r.ids, r.copies, 0


def fine_tune(base: Path, out: Path, steps: int = 800, seq_len: int = 320, batch: int = 16, lr: float = 3e-4,
              seed: int = 0, dense_share: float = DENSE_SHARE) -> dict[str, float]:
    """Fine-tune `base` on thinking rows into `out` (with the template); the run's figures."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    loaded = load_model(base)
    model, tok = loaded.model, ByteTokenizer()
    curriculum = SyntheticText(seq_len, seed)
    model.config.max_position_embeddings = seq_len
    model.backend = "torch"
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    start, first, loss_value = time.perf_counter(), None, float("nan")
    for step in range(steps):
        rows = [row(rng, tok, seq_len) if rng.random() >= dense_share else dense(curriculum) for _ in range(batch)]
        width = max(len(ids) for ids, _, _ in rows) - 1
        inputs = torch.full((batch, width), tok.PAD, dtype=torch.long)
        targets = torch.full((batch, width), -100, dtype=torch.long)
        copies = torch.zeros((batch, width), dtype=torch.bool)
        for i, (ids, spans, prompt) in enumerate(rows):
            inputs[i, :len(ids) - 1] = torch.tensor(ids[:-1])
            targets[i, :len(ids) - 1] = torch.tensor(ids[1:])
            if prompt:  # the template's "\n" + block are the prompt's, not learnt
                targets[i, prompt - 1 - len(EMPTY_BLOCK):prompt - 1] = -100
            for s, n in spans:
                copies[i, s - 1:s - 1 + n] = True
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / steps))
        logits, _ = model(inputs)
        loss, _ = weighted_loss(logits, targets, copies, 10.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = float(loss.detach())
        first = loss_value if first is None else first
    model.eval()
    model.backend = "auto"
    out.mkdir(parents=True, exist_ok=True)
    save_model(model, out, tok)
    (out / CHAT_TEMPLATE_FILE).write_text(TEMPLATE)
    info = {"base": str(base), "steps": steps, "seq_len": seq_len, "batch": batch, "lr": lr, "seed": seed,
            "dense_share": dense_share,
            "seconds": round(time.perf_counter() - start, 1), "first_loss": first, "final_loss": loss_value,
            "command": f"python -m training.thinking --base {base} --out {out} --steps {steps} --seq-len {seq_len} "
                       f"--lr {lr} --dense-share {dense_share}"}
    (out / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("demo/checkpoints/softmax"))
    parser.add_argument("--out", type=Path, default=Path("demo/thinking"))
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seq-len", type=int, default=320)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--dense-share", type=float, default=DENSE_SHARE)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(json.dumps(fine_tune(args.base, args.out, args.steps, args.seq_len, lr=args.lr,
                               dense_share=args.dense_share), indent=2))


if __name__ == "__main__":
    main()
