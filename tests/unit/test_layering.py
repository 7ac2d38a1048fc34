"""The import graph keeps the layers of docs/ARCHITECTURE.md: no circles, imports point down,
config knows no store or back end, the core never imports Ray or the glue above it, and no
module outgrows a reading (500 lines). Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from collections.abc import Container
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("memroute", "pipelines", "serve", "jobs")
MAX_LINES = 500

# memroute's packages, bottom first: a module may import its own layer and the layers below.
LAYERS: list[set[str]] = [
    {"memroute", "memroute.types", "memroute.errors", "memroute.registry", "memroute.logs",
     "memroute.namespace"},
    {"memroute.config"},
    {"memroute.accounting", "memroute.text", "memroute.datasets", "memroute.tracking"},
    {"memroute.assets"},
    {"memroute.embedding", "memroute.llm"},
    {"memroute.memory"},
    {"memroute.retrieval"},
    {"memroute.routing", "memroute.journal", "memroute.api"},
    {"memroute.build"},
    {"memroute.serving", "memroute.ingest", "memroute.eval"},
]
GLUE = ["pipelines", "serve", "jobs"]  # above the core, in this order
# What config may import: its own schemas and the bottom layer, never a store or a back end.
CONFIG_MAY_IMPORT = {"memroute.config", *LAYERS[0]}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imported_names(path: Path, name: str, known: Container[str] = ()) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import module` depends on the module; `from module import name` on it.
            for a in node.names:
                out.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else module)
    return out


@cache
def graph() -> dict[str, frozenset[str]]:
    """Project module -> the project modules it imports (anywhere in the file, lazy ones too)."""
    mods = modules()
    edges: dict[str, frozenset[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in _imported_names(path, name, mods):
            while imported and imported not in mods:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = frozenset(targets)
    return edges


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "memroute" and len(parts) > 1 else parts[0]


def _rank(layer: str) -> int:
    for i, members in enumerate(LAYERS):
        if layer in members:
            return i
    if layer in GLUE:
        return len(LAYERS) + GLUE.index(layer)
    raise AssertionError(f"{layer} is in no layer: add it to LAYERS in {__file__}")


def _circles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert "memroute.routing.router" in edges and "serve.app" in edges
    assert "memroute.llm.base" in edges["memroute.routing.request"]


def test_no_import_circles():
    assert _circles(graph()) == []


def test_circle_finder_finds_a_planted_circle():
    planted = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert _circles(planted) == [["a", "b", "c"]]


def test_imports_point_down_the_layers():
    upward = sorted(
        f"{a} -> {b}"
        for a, targets in graph().items()
        for b in targets
        if _rank(_layer_of(b)) > _rank(_layer_of(a))
    )
    assert upward == []


def test_config_imports_no_store_or_back_end():
    bad = sorted(
        f"{a} -> {b}"
        for a, targets in graph().items()
        if _layer_of(a) == "memroute.config"
        for b in targets
        if _layer_of(b) not in CONFIG_MAY_IMPORT
    )
    assert bad == []


@pytest.mark.parametrize("forbidden", ["ray", "hydra"])
def test_the_core_imports_no_ray_and_no_hydra_outside_config(forbidden):
    """memroute/ is pure Python; Hydra appears only in config's one conversion seam."""
    bad = []
    for name, path in modules().items():
        if not name.startswith("memroute"):
            continue
        if forbidden == "hydra" and _layer_of(name) == "memroute.config":
            continue
        hits = [m for m in _imported_names(path, name) if m == forbidden or m.startswith(forbidden + ".")]
        if hits:
            bad.append(f"{name}: {sorted(hits)[0]}")
    assert bad == []


def test_no_module_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in [*modules().values(), *sorted((ROOT / "bench").glob("*.py"))]
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
