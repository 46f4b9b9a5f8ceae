"""The Python package's layers (docs STYLE: the DSL, the compiler, the verifier, the algorithm library,
the runtime API and the tools; a lower layer never imports a higher one) and no import cycles, read from
the sources (ast), so that a new module or import that breaks them fails here rather than in review."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "compiler" / "loom"

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("loom.errors", "loom.version", "loom.native")),  # native: lazy access to loom._native, nothing else
    ("plan model", ("loom.ir.model", "loom.plan")),  # plan.validate reads plans through the native decoder
    ("dsl", ("loom.language",)),
    ("compiler", ("loom.ir", "loom.passes", "loom.assembly", "loom.compiler.emit")),
    ("verifier", ("loom.verify",)),
    ("library", ("loom.algorithms", "loom.interop", "loom.compiler")),  # the driver and the JIT compile algorithms
    ("runtime api", ("loom.runtime", "loom.launch")),
    ("tools", ("loom.tools", "loom.__main__", "loom")),
]

# Upward imports that stay, each inside a function (so no cycle at import time), with the reason.
ALLOWED_UPWARD = {
    # MSCCL++'s API compiles from the program object (program.to_json()): the DSL calls the compiler.
    ("loom.language.program", "loom.passes"),
    ("loom.language.program", "loom.compiler.emit"),
}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("loom", *path.relative_to(PACKAGE).with_suffix("").parts))
        modules[name.removesuffix(".__init__")] = path
    return modules


def _layer(module: str) -> int | None:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def _imports(path: Path, modules: dict[str, Path], top_level_only: bool) -> list[tuple[str, int]]:
    """(module, line) of every loom module `path` imports (the extension loom._native left out)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("loom"):
            for alias in node.names:
                if alias.name == "_native":
                    continue
                child = f"{node.module}.{alias.name}"
                found.append((child if child in modules else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("loom")]
    return found


def test_every_module_has_a_layer():
    assert [name for name in _modules() if _layer(name) is None] == []


def test_no_module_imports_a_higher_layer():
    modules = _modules()
    upward = []
    for name, path in sorted(modules.items()):
        for target, line in _imports(path, modules, top_level_only=False):
            if _layer(target) > _layer(name) and (name, target) not in ALLOWED_UPWARD:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: {name} ({LAYERS[_layer(name)][0]}) "
                    f"imports {target} ({LAYERS[_layer(target)][0]})"
                )
    assert upward == []


def test_no_import_cycles_at_import_time():
    modules = _modules()
    edges = {
        name: {target for target, _ in _imports(path, modules, True) if target in modules and target != name}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(edges[name]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(modules):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_top_level_holds_only_the_base_and_the_entry_points():
    """Every other module lives in the folder of its layer (plan/, compiler/, runtime/, tools/, ...)."""
    top_level = sorted(path.stem for path in PACKAGE.glob("*.py"))
    assert top_level == ["__init__", "__main__", "errors", "launch", "native", "version"]
