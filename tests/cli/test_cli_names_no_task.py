"""`lctx` names no task: its flags, help, examples and `lctx score` commands come from the
registry (each task folder's options and `score.py`), so adding or renaming a task never
edits cli/. A task's name in any spelling (passkey, longbench_v2, longbench-v2, RULER) in
any cli/ module, code, string or comment, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from evaluators.registry import registry, scorers

CLI = Path(__file__).resolve().parents[2] / "cli"


def spellings() -> set[str]:
    """Every registered task's name and its `lctx score` command, with _ and - both ways."""
    names = set(registry()) | {s.command for s in scorers()} | {a for s in scorers() for a in s.aliases}
    return {n.lower() for name in names for n in (name, name.replace("_", "-"), name.replace("-", "_"))}


def named_tasks(text: str, names: set[str]) -> list[str]:
    """The task names `text` holds as words (case-insensitive). An identifier is one word
    (`passkey_text` is not `passkey`); a hyphenated word is also each of its parts
    ("passkey-protocol" names `passkey`)."""
    found = []
    for word in re.findall(r"[a-z0-9_]+(?:-[a-z0-9_]+)*", text.lower()):
        found += [piece for piece in dict.fromkeys([word, *word.split("-")]) if piece in names]
    return found


def test_cli_names_no_task() -> None:
    names = spellings()
    assert {"passkey", "longbench-v2", "aa_lcr"} <= names  # the registry was read
    found = {f"{path.name}:{n}: {word}" for path in sorted(CLI.glob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for word in named_tasks(line, names)}
    assert not found, "cli/ names a task (take it from the registry):\n" + "\n".join(sorted(found))


def test_the_check_sees_a_task_name() -> None:
    names = {"passkey", "longbench", "longbench_v2", "longbench-v2", "ruler"}
    assert named_tasks('help="e.g. passkey:lengths=256"', names) == ["passkey"]
    assert named_tasks("NVIDIA RULER's tasks", names) == ["ruler"]
    assert "longbench-v2" in named_tasks("lctx score longbench-v2", names)
    assert named_tasks("from checkpoints.passkey_text import rows", names) == []
