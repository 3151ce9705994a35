"""lctx's BABILong generator and answer comparison against the official code, run side by
side: `python bench/babilong_parity.py --official DIR` where DIR is a checkout of
booydar/babilong (its `babilong/babilong_utils.py` and `babilong/metrics.py` are imported
from there, not copied; they need pandas 2.2 as the official requirements pin: pandas 3
reads the bAbI answers differently and the official parser fails).

Crafted inputs (random word books, one of them empty; a bAbI file of 12 stories with 1-4
questions each), lengths 0 to 2300 word tokens, three seeds: the official
SentenceSampler(random_seed=seed) / NoiseInjectionDataset(42) / np.random.seed(seed) +
np.random.shuffle against `evaluators.babilong.generator.generate(seed=seed)`; then
metrics.compare_answers against lctx's on 30000 random outputs. Prints one line per case
and a verdict; bench/results/babilong_parity.txt is its saved output."""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluators.babilong import generator, protocol  # noqa: E402


class Words:
    """Each whitespace-led word one token, with the Hugging Face call surface the official code uses."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out = []
        for w in re.findall(r"\s*\S+", text):
            out.append(self.ids.setdefault(w, len(self.ids)))
            self.words[self.ids[w]] = w
        return out

    def __call__(self, texts, add_special_tokens: bool = False) -> dict:
        if isinstance(texts, str):
            return {"input_ids": self.encode(texts)}
        return {"input_ids": [self.encode(t) for t in texts]}

    def decode(self, ids: list[int]) -> str:
        return "".join(self.words[i] for i in ids)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", required=True, help="checkout of github.com/booydar/babilong")
    args = parser.parse_args()
    sys.path.insert(0, args.official)
    from babilong.babilong_utils import NoiseInjectionDataset, SentenceSampler, TaskDataset
    from babilong.metrics import TASK_LABELS
    from babilong.metrics import compare_answers as official_compare

    rng = random.Random(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()

    def book(n: int) -> str:
        return " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(8, 20))).capitalize() + "."
                        for _ in range(n))

    books = [book(300), "", book(200), book(50)]
    lines = []
    for _ in range(12):
        n = 1
        for k in range(rng.randint(2, 7)):
            lines.append(f"{n} Mary went to the room{k}.")
            n += 1
            if rng.random() < 0.5:
                lines.append(f"{n} Where is Mary?\troom{k}\t{n - 1}")
                n += 1
        lines.append(f"{n} Where is Mary?\troomX\t1 2")
    tok = Words()
    same_all = True
    with tempfile.TemporaryDirectory() as tmp:
        babi = Path(tmp) / "qa.txt"
        babi.write_text("\n".join(lines) + "\n")
        for length in (0, 320, 400, 1300, 2300):
            for seed in (1, 42, 7):
                ml = length - 300
                ds = TaskDataset(str(babi), max_n_facts=ml // 8) if ml > 0 else TaskDataset(str(babi))
                sampler = SentenceSampler([{"text": b} for b in books], tokenizer=tok, shuffle=True, random_seed=seed)
                noise = NoiseInjectionDataset(task_dataset=ds, noise_sampler=sampler, tokenizer=tok, sample_size=ml)
                inds = list(range(len(noise)))
                np.random.seed(seed)
                np.random.shuffle(inds)
                theirs = [noise[i] for i in inds[:5]]
                theirs = [(tok.decode(s["input_tokens"]).strip(), s["question"], tok.decode(s["target_tokens"]),
                           [int(p) for p in s["fact_positions"]]) for s in theirs]
                ours = [(g.input, g.question, g.target, list(g.fact_positions)) for g in
                        generator.generate(babi.read_text(), books, tok.encode, tok.decode, length, 5, seed)]
                same = theirs == ours
                same_all &= same
                print(f"generator length={length} seed={seed}: {len(ours)} samples, "
                      f"{len(ours[0][0])} characters in the first, {'same' if same else 'DIFFERENT'}")
    compared = agreed = 0
    for task in protocol.TASKS:
        labels = list(TASK_LABELS[task])
        assert tuple(labels) == protocol.TASK_LABELS[task], task
        vocab = labels + ["The", "is", "in", "Question:", "<context>", ".", ",", "NOT", "Kitchen", "None"]
        for _ in range(3000):
            output = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 5)))
            target = rng.choice(labels + ["apple,milk", "milk,football"])
            question = "Where is the " + rng.choice(labels) + "?"
            compared += 1
            agreed += official_compare(target, output, question, labels) == protocol.compare_answers(
                target, output, question, tuple(labels))
    print(f"compare_answers: {agreed} of {compared} judgements the same")
    ok = same_all and agreed == compared
    print("ALL SAME" if ok else "DIFFERENCES FOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
