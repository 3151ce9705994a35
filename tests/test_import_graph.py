"""No import circles in lctx's packages: a module of a circle cannot be read or tested
alone. Every `import` counts: those inside functions (a deferred import is still a
dependency) and those under `if TYPE_CHECKING:` (a type a module names is one it depends
on: hiding it there hides the circle, not the dependency). Read from the source with `ast`,
so a circle fails here even when import order happens to hide it."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("checkpoints", "clients", "training", "evaluators", "service", "cli")
# The packages each may import (besides itself): arrows point only downward (docs/architecture.md)
MAY_IMPORT = {"checkpoints": set(), "clients": {"checkpoints"}, "training": {"checkpoints"},
              "evaluators": {"checkpoints"}, "service": {"checkpoints", "clients", "training", "evaluators"},
              "cli": {"checkpoints", "clients", "training", "evaluators", "service"}}


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its __init__)."""
    out = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imported(path: Path) -> list[str]:
    """The names a module imports (`from a.b import c` gives `a.b.c`), wherever the import stands."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the lctx modules it imports (a name resolves to its longest module prefix)."""
    mods = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    return {m: {r for n in imported(path) if (r := resolve(n)) and r != m} for m, path in mods.items()}


def circle(deps: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(TopologicalSorter(deps).static_order())
    except CycleError as e:
        return list(e.args[1])
    return None


def test_no_module_imports_itself_through_others() -> None:
    found = circle(graph(ROOT))
    assert found is None, "import circle: " + " -> ".join(found or [])


def upward(deps: dict[str, set[str]]) -> list[str]:
    """`a -> b` for every import of a package that `MAY_IMPORT` does not allow."""
    top = lambda m: m.partition(".")[0]  # noqa: E731
    return sorted(f"{m} -> {d}" for m, ds in deps.items() for d in ds
                  if top(d) != top(m) and top(d) not in MAY_IMPORT[top(m)])


def test_dependencies_point_one_way() -> None:
    assert set(MAY_IMPORT) == set(PACKAGES)
    assert upward(graph(ROOT)) == [], "an import against the layering (docs/architecture.md)"


def test_the_kv_cache_imports_only_itself() -> None:
    """`checkpoints/kv/` is a room below the attention that reads it and the engine that fills
    it: it imports no other lctx module (vLLM keeps its block pool apart the same way)."""
    room = lambda m: m == "checkpoints.kv" or m.startswith("checkpoints.kv.")  # noqa: E731
    deps = graph(ROOT)
    assert {"checkpoints.kv.block_pool", "checkpoints.kv.paged_seq"} <= {m for m in deps if room(m)}
    assert sorted(f"{m} -> {d}" for m, ds in deps.items() if room(m) for d in ds if not room(d)) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "service" / "jobs.py").write_text("def run():\n    return 1\n")
    (tmp_path / "checkpoints" / "model.py").write_text("def f():\n    from service.jobs import run\n    return run\n")
    (tmp_path / "training" / "train.py").write_text("from checkpoints.model import f\n")
    assert upward(graph(tmp_path)) == ["checkpoints.model -> service.jobs"]


def test_the_check_sees_deferred_and_type_only_circles(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "checkpoints" / "a.py").write_text("from checkpoints.b import f\n")
    (tmp_path / "checkpoints" / "b.py").write_text("def f():\n    return 1\n")
    assert circle(graph(tmp_path)) is None
    (tmp_path / "checkpoints" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from checkpoints.a import g\n\n"
        "def f():\n    return 1\n")
    assert set(circle(graph(tmp_path)) or []) == {"checkpoints.a", "checkpoints.b"}  # a type is a dependency
    (tmp_path / "checkpoints" / "b.py").write_text("def f():\n    from checkpoints.a import g\n    return g\n")
    assert set(circle(graph(tmp_path)) or []) == {"checkpoints.a", "checkpoints.b"}
