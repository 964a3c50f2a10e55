"""`python -m lib imports`: every module of the package with the workbook modules it imports (at the top or inside
functions), whether any generic module reaches into an environment package, and any import cycle.

The architecture tests (tests/test_architecture.py) read the same graph.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # the package folder, lib/
ENVS = "lib.envs"


def module_name(path: Path) -> str:
    parts = ("lib", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        package = current.split(".") if is_package else current.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    if node.module is None:  # from . import a, b: each name is a module
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:` (imports for type hints only, never run)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from (n for other in child.orelse for n in (other, *_runtime_nodes(other)))
            continue
        yield child
        yield from _runtime_nodes(child)


@cache
def _modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in ROOT.rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    """Workbook modules (under `lib`) this file imports when it runs, anywhere in it (top level or in functions)."""
    current, is_package = module_name(path), path.name == "__init__.py"
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(current, is_package, node))
    modules = _modules()
    resolved = set()
    for name in found:
        if not (name == "lib" or name.startswith("lib.")):
            continue
        while name not in modules and "." in name:  # `from pkg import function` names the module pkg
            name = name.rsplit(".", 1)[0]
        if name != current:
            resolved.add(name)
    return resolved


def environment_packages() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "envs").glob("*/__init__.py"))


def owner(module: str) -> str | None:
    """The environment package a module belongs to, or None for generic code (lib.envs itself is generic)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["lib", "envs"] and parts[2] in environment_packages() else None


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(ROOT.rglob("*.py"))}


def env_violations(edges: dict[str, set[str]] | None = None) -> list[str]:
    """Every import from outside an environment package into one ("module -> imported")."""
    edges = edges or graph()
    return [
        f"{m} -> {t}"
        for m, targets in edges.items()
        for t in sorted(targets)
        if owner(t) is not None and owner(t) != owner(m)
    ]


def cycles(edges: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Import cycles, each as the list of modules around it (empty when the graph is acyclic)."""
    edges = edges or graph()
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def report() -> str:
    edges = graph()
    lines = []
    for module, targets in edges.items():
        if owner(module) is None:
            lines.append(f"{module}: {', '.join(sorted(targets)) or '-'}")
    violations, loops = env_violations(edges), cycles(edges)
    lines.append(f"environment packages: {environment_packages()}")
    lines.append("generic modules importing an environment package: " + (", ".join(violations) or "none"))
    lines.append("import cycles: " + ("; ".join(" -> ".join(c) for c in loops) or "none"))
    return "\n".join(lines)
