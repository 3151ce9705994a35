"""RULER prompts against docs/protocols/ruler.md, character for character: the templates,
answer prefixes and wrappers read from the page itself, and for every task a generated
sample (fixed seed) parsed back with the page's template and checked for the protocol's
haystack, needles and references; lengths never exceed the target with the budget."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from evaluators.errors import EvaluatorError
from evaluators.ruler.options import RULER_TASKS
from evaluators.ruler.protocol import TASKS, WRAPPERS, full_template, single_needle, split_wrapper
from evaluators.ruler.synthetic import DEPTHS, generate

PAGE = (Path(__file__).resolve().parents[3] / "docs" / "protocols" / "ruler.md").read_text()


def section(title: str) -> str:
    start = PAGE.index(f"## {title}")
    return PAGE[start:PAGE.index("\n## ", start + 3)]


def blocks(text: str) -> list[str]:
    return re.findall(r"```json\n(.*?)```", text, re.S)


def strings(block: str) -> list[str]:
    return [json.loads(line) for line in block.strip().splitlines()]


S3 = blocks(section("3."))
S4 = blocks(section("4."))
PAGE_SCRIPTS = {"niah": strings(S3[0]), "variable_tracking": strings(S3[2]),
                "common_words_extraction": strings(S3[3]), "freq_words_extraction": strings(S3[4]),
                "qa": strings(S3[5])}
SINGLE = strings(S3[1])[0]
PAGE_WRAPPERS = json.loads(S3[6])
NEEDLE, NOISE = strings(S4[0])[0], strings(S4[1])[0]
GEN = {"niah": 128, "variable_tracking": 30, "common_words_extraction": 120, "freq_words_extraction": 50, "qa": 32}


def test_templates_prefixes_wrappers_are_the_pages() -> None:
    for script, (template, prefix) in PAGE_SCRIPTS.items():
        spec = next(t.spec for t in TASKS.values() if t.script == script)
        assert (spec.template, spec.answer_prefix, spec.tokens_to_generate) == (template, prefix, GEN[script])
    assert single_needle(full_template(*PAGE_SCRIPTS["niah"], ("", ""))) == SINGLE
    assert WRAPPERS == PAGE_WRAPPERS
    assert single_needle(full_template("T", "", split_wrapper(WRAPPERS["lwm-chat"]))).startswith("You is a helpful")
    assert DEPTHS == [int(x) for x in re.search(r"`(0, 3, 5.*?100)`", section("4.")).group(1).split(", ")]


def pattern(template: str, **fields: str) -> re.Pattern:
    """The page's template as a regex: each {field} captures (context greedily)."""
    out = re.escape(template)
    for name in re.findall(r"\{(\w+)\}", template):
        esc = re.escape("{" + name + "}")
        group = fields.get(name, f"(?P<{name}>.*)" if name == "context" else f"(?P<{name}>.*?)")
        out = out.replace(esc, group, 1).replace(esc, f"(?P={name})" if name not in fields else fields[name])
    return re.compile(out + r"\Z", re.S)


LENGTHS = {"niah_single_1": 600, "niah_single_2": 1200, "niah_single_3": 1200, "niah_multikey_1": 1300,
           "niah_multikey_2": 900, "niah_multikey_3": 1200, "niah_multivalue": 1300, "niah_multiquery": 1300,
           "vt": 1000, "cwe": 1500, "fwe": 900, "qa_1": 600, "qa_2": 1200}


@pytest.mark.parametrize("task", RULER_TASKS)
def test_every_task_builds_the_pages_prompt(task: str, word_tokenizer, ruler_data: Path) -> None:
    spec, length = TASKS[task], LENGTHS[task]
    samples = generate(task, word_tokenizer, length, 3, seed=42, data_dir=ruler_data)
    again = generate(task, word_tokenizer, length, 2, seed=42, data_dir=ruler_data)
    assert [s.prompt for s in again] == [s.prompt for s in samples[:2]]  # one stream: fewer samples = a prefix
    other = generate(task, word_tokenizer, length, 1, seed=7, data_dir=ruler_data)
    assert other[0].prompt != samples[0].prompt
    for s in samples:
        ids = word_tokenizer.encode(s.prompt)  # what the model receives, BOS included
        assert s.length == len(ids) + spec.spec.tokens_to_generate <= length
        assert s.answer_prefix.startswith(spec.spec.answer_prefix[:10])
        template, prefix = PAGE_SCRIPTS[spec.script]
        CHECKS[spec.script](spec, s, template, prefix)


def check_niah(spec, s, template: str, prefix: str) -> None:
    single = spec.num_q * spec.num_v == 1
    v = spec.type_v[:-1] if single else spec.type_v
    page = SINGLE if single else template + prefix
    m = pattern(page, type_needle_v=re.escape(v)).match(s.prompt)
    assert m, s.prompt[:300]
    context, query = m["context"], m["query"]
    keys = query.split(", and ")[-1:] if spec.num_q == 1 else re.split(r", and |, ", query)
    assert len(keys) == spec.num_q
    needles = re.findall(r"One of the special magic \w+ for (.+?) is: (\S+?)\.(?=\s|$)", context)
    found = {}
    for k, val in needles:
        found.setdefault(k, []).append(val)
    # the references: every value of each asked key, keys in the order asked (a key's values in
    # drawing order, which the shuffled context does not show)
    assert [sorted(found[k]) for k in keys] == [sorted(s.outputs[i * spec.num_v:(i + 1) * spec.num_v])
                                                for i in range(len(keys))]
    assert len(s.outputs) == spec.num_q * spec.num_v
    ref_needles = [NEEDLE.format(type_needle_v=spec.type_v, key=k, value=val) for k in keys for val in found[k]]
    assert all(n in context for n in ref_needles)
    if spec.type_v == "numbers":
        assert all(re.fullmatch(r"[1-9]\d{6}", r) for r in s.outputs)
    if spec.type_k == "words":
        assert all(re.fullmatch(r"[A-Za-z ]+(-[A-Za-z ]+)+", k) for k in keys)  # a few list entries hold spaces
    if spec.haystack == "noise":
        lines = context.split("\n")
        assert Counter(line == NOISE for line in lines)[False] == len(ref_needles)
    elif spec.haystack == "needle":
        assert all(re.fullmatch(re.escape(NEEDLE).replace(r"\{type_needle_v\}", spec.type_v)
                                .replace(r"\{key\}", r".+").replace(r"\{value\}", r"\S+"), line)
                   for line in context.split("\n"))
    else:  # essay sentences joined by single spaces, needles between them
        assert context.startswith(("I started", "One of the special")) and "Most of them were about startups." \
            in context


def check_vt(spec, s, template: str, prefix: str) -> None:
    anchor = template[:20]
    cut = s.prompt.rindex(anchor)
    example, main = s.prompt[:cut], s.prompt[cut:]
    assert example.startswith(anchor) and example.endswith("\n\n")  # example + " answers\n" + "\n"
    m = pattern(template + prefix, num_v="5").match(main)
    assert m
    value = m["query"]
    assert re.fullmatch(r"\d{5}", value)
    lines = m["context"].split("\n")
    chain = [line for line in lines if line != NOISE]
    assert len(chain) == 5 and chain[0] == f"VAR {s.outputs[0]} = {value}"
    for j in range(1, 5):
        assert chain[j] == f"VAR {s.outputs[j]} = VAR {s.outputs[j - 1]} "
    ex = pattern(template + prefix, num_v="5").match(example.removesuffix("\n\n").rsplit(" ", 5)[0])
    assert ex is not None and "12345" not in example  # its value re-drawn per sample


def check_cwe(spec, s, template: str, prefix: str) -> None:
    example, main = s.prompt.split("\n" + template[:20], 1)
    main = template[:20] + main
    m = pattern(template + prefix, query="").match(main)
    assert m
    numbered = re.findall(r"(\d+)\. (.+?)(?= \d+\. |\Z)", m["context"])
    assert [int(i) for i, _ in numbered] == list(range(1, len(numbered) + 1))
    words = [w for _, w in numbered]
    counts = Counter(words)
    common = 30 if s.length >= 4096 or LENGTHS["cwe"] >= 4096 else 6
    assert sorted(w for w, c in counts.items() if c == common) == sorted(s.outputs) and len(s.outputs) == 10
    assert all(c == 1 for w, c in counts.items() if w not in s.outputs)
    assert example.startswith(template[:20]) and re.search(r"are: 1\. \S+ 2\. .* 10\. \S+$", example)


def check_fwe(spec, s, template: str, prefix: str) -> None:
    m = pattern(template + prefix, query="").match(s.prompt)
    assert m
    ranked = [w for w, _ in Counter(m["context"].split(" ")).most_common()]
    assert ranked[0] == "..." and ranked[1:4] == s.outputs
    assert all(re.fullmatch(r"[a-z]{6}", w) for w in s.outputs)


def check_qa(spec, s, template: str, prefix: str) -> None:
    m = pattern(template + prefix).match(s.prompt)
    assert m
    docs = re.split(r"\n\n(?=Document \d+:\n)", m["context"])
    assert [d.split(":\n", 1)[0] for d in docs] == [f"Document {i + 1}" for i in range(len(docs))]
    if spec.dataset == "squad":
        i = int(re.search(r"river (\d+)", m["query"]).group(1))
        assert s.outputs == [f"lake {i}", f"into lake {i}"]
        assert any(f"river number {i} flows" in d for d in docs)
    else:
        q = int(re.search(r"bridge (\d+)", m["query"]).group(1))
        assert s.outputs == [f"Town{q}"]
        assert sum(f"Bridge {q} is in Town{q}." in d for d in docs) == 10  # all ten context paragraphs


CHECKS = {"niah": check_niah, "variable_tracking": check_vt, "common_words_extraction": check_cwe,
          "freq_words_extraction": check_fwe, "qa": check_qa}


def test_cwe_at_4096_uses_30_and_3_repeats(word_tokenizer) -> None:
    s = generate("cwe", word_tokenizer, 4096, 1)[0]
    main = s.prompt[s.prompt.index("\nBelow is") + 1:]
    counts = Counter(w for _, w in re.findall(r"(\d+)\. (.+?)(?= \d+\. |\nQuestion)", main))
    assert {counts[w] for w in s.outputs} == {30} and s.length <= 4096


def test_too_short_a_length_is_an_error_naming_task_and_length(word_tokenizer) -> None:
    with pytest.raises(EvaluatorError, match=r"niah_single_1 does not fit in 150 tokens"):
        generate("niah_single_1", word_tokenizer, 150, 1)


def test_a_chat_wrapper_goes_around_the_task_and_the_prefix_after_it(word_tokenizer) -> None:
    s = generate("niah_single_1", word_tokenizer, 600, 1, wrapper=split_wrapper(WRAPPERS["meta-chat"]))[0]
    assert s.prompt.startswith("[INST] A special magic number is hidden")
    assert re.search(r"mentioned in the provided text\? \[/INST\] The special magic number for \S+ mentioned in "
                     r"the provided text is\Z", s.prompt)
    assert s.answer_prefix.startswith(" The special magic number for")
