"""Tests mirror the tree: every test file sits in the tests/ folder that mirrors a folder of the
code and is named after what it tests there, so a module's tests are found beside its path.
`tests/<folder>/test_<name>.py` tests `<folder>/<name>.py`; `test_<name>_<aspect>.py` one aspect
of it (several files per module, each saying which); `test_<folder's own name>[_<aspect>].py`
the folder's package as a whole (`tests/evaluators/mrcr/test_mrcr.py`). A test of a sub-package
sits in that sub-package's mirror, never beside it. Cross-cutting tests are listed below with
why."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# Tests of no one module, each with why.
CROSS_CUTTING = {
    "tests/test_architecture_map.py": "docs/architecture.md against every module of the six packages",
    "tests/test_import_graph.py": "the import graph of the six packages: no circles, arrows one way",
    "tests/test_readme.py": "README.md's claims against the code",
    "tests/test_layout_mirrors.py": "this rule, over every test file",
    "tests/docker/test_compose.py": "docker/ holds no Python: the compose files and .env.example against the settings",
    "tests/evaluators/test_adding_a_task.py": "a toy task folder through the registry, the CLI and the API",
    "tests/service/test_readme_commands.py": "every command block of the README and the guide, run end to end",
}


def names_in(folder: Path) -> set[str]:
    """What a test in `folder`'s mirror may be named after: its modules and its own name."""
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | {folder.name}


def misplaced(tests: Path, repo: Path, allowed: set[str]) -> list[str]:
    """Test files that mirror no module or package path (relative to the repository)."""
    out = []
    for path in sorted(tests.rglob("test_*.py")):
        relative = path.relative_to(repo).as_posix()
        if relative in allowed:
            continue
        folder = repo / path.parent.relative_to(tests)
        name = path.stem.removeprefix("test_")
        names = names_in(folder) if folder.is_dir() and folder != repo else set()
        if not any(name == n or name.startswith(n + "_") for n in names):
            out.append(relative)
    return out


def test_every_test_file_mirrors_a_module() -> None:
    found = misplaced(TESTS, REPO, set(CROSS_CUTTING))
    assert found == [], ("test files that mirror no module: move each beside the module it tests "
                         "(tests/<folder>/test_<module>[_<aspect>].py) or list it in CROSS_CUTTING with why: "
                         + ", ".join(found))


def test_the_lists_name_files_that_exist() -> None:
    stale = sorted(p for p in set(CROSS_CUTTING) if not (REPO / p).is_file())
    assert stale == [], "listed test files that are gone (drop them from the lists): " + ", ".join(stale)


def test_the_rule_sees_a_flat_task_test_and_a_stray_name(tmp_path: Path) -> None:
    for module in ("evaluators/registry.py", "evaluators/mrcr/evaluator.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    tests = tmp_path / "tests"
    for test in ("evaluators/test_registry.py", "evaluators/test_registry_names.py",
                 "evaluators/mrcr/test_evaluator.py", "evaluators/mrcr/test_mrcr.py",
                 "evaluators/test_mrcr.py", "evaluators/mrcr/test_behaviour.py", "nowhere/test_x.py",
                 "test_anything.py"):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    assert misplaced(tests, tmp_path, {"tests/test_anything.py"}) == [
        "tests/evaluators/mrcr/test_behaviour.py", "tests/evaluators/test_mrcr.py", "tests/nowhere/test_x.py"]
