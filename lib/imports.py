"""`python -m lib imports`: every module of the package with the workbook modules it imports (at the top or inside
functions), whether any generic module reaches into an environment package, any import cycle between modules or
between floors (a floor is a folder or a loose module of lib/: two floors that import each other, directly or through
others, are one cycle), and any import hidden behind a string (`importlib.import_module(...)`, `__import__(...)`, a
"module:function" string), which the graph could not see.

The architecture tests (tests/test_architecture.py) read the same graph.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # the package folder, lib/
ENVS = "lib.envs"

# The one dynamic import lib/ may make, by (module, function): the environment registry imports the environment a
# config or --env names (a package under lib/envs/, or a dotted path defining SPEC such as `env: tests.toyenv`). That
# name is user input, known only at run time, so no import statement can name it; every other workbook import is a
# statement.
ALLOWED_DYNAMIC_IMPORTS = {
    ("lib.envs", "get_spec"): "the environment registry imports the environment package a config names (user input)",
}
DYNAMIC_IMPORT_CALLS = ("import_module", "__import__")  # importlib.import_module, __import__, importlib.__import__
_MODULE_FUNCTION = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)")  # "training.sft:run_sft"


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


def floor(module: str) -> str:
    """The floor a module stands on: its folder or loose module directly under lib/ ("lib.training.grpo" ->
    "lib.training", "lib.io" -> "lib.io"; the package itself is "lib")."""
    return ".".join(module.split(".")[:2])


def floor_graph(edges: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """The module graph seen a floor at a time: floor -> the other floors its modules import."""
    edges = edges or graph()
    floors: dict[str, set[str]] = {}
    for module, targets in edges.items():
        floors.setdefault(floor(module), set()).update(floor(t) for t in targets if floor(t) != floor(module))
    return floors


def floor_cycles(edges: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Cycles between floors (empty when every floor imports only floors below it)."""
    return cycles(floor_graph(edges))


def floor_ties(edges: dict[str, set[str]], cycle: list[str]) -> list[str]:
    """The module imports behind a floor cycle, each as "module -> imported"."""
    steps = set(zip(cycle, cycle[1:]))
    return [f"{m} -> {t}" for m, targets in edges.items() for t in sorted(targets) if (floor(m), floor(t)) in steps]


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _names_a_module(text: str) -> bool:
    """Does a "module:function" string name a workbook module ("lib.x.y:f", or "x.y:f" relative to lib)?"""
    match = _MODULE_FUNCTION.fullmatch(text)
    if match is None:
        return False
    module = match.group(1)
    return module in _modules() or f"lib.{module}" in _modules()


def hidden_in_source(source: str, module: str) -> list[str]:
    """Imports in `source` (the text of `module`) that a reader of its import statements cannot see: calls to
    importlib.import_module or __import__ (except in ALLOWED_DYNAMIC_IMPORTS) and "module:function" strings naming
    a workbook module. Each as "module:line: what"."""
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Call) and _called_name(child) in DYNAMIC_IMPORT_CALLS:
                if (module, function) not in ALLOWED_DYNAMIC_IMPORTS:
                    found.append(f"{module}:{child.lineno}: {ast.unparse(child)}")
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and _names_a_module(child.value):
                found.append(f"{module}:{child.lineno}: {child.value!r}")
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            visit(child, inner)

    visit(ast.parse(source), None)
    return found


def hidden_imports() -> list[str]:
    """Every import hidden behind a string in lib/ (see `hidden_in_source`); the allowed one is not listed."""
    return [
        hit
        for path in sorted(ROOT.rglob("*.py"))
        for hit in hidden_in_source(path.read_text(encoding="utf-8"), module_name(path))
    ]


def report() -> str:
    edges = graph()
    lines = []
    for module, targets in edges.items():
        if owner(module) is None:
            lines.append(f"{module}: {', '.join(sorted(targets)) or '-'}")
    violations, loops, floor_loops = env_violations(edges), cycles(edges), floor_cycles(edges)
    lines.append(f"environment packages: {environment_packages()}")
    lines.append("generic modules importing an environment package: " + (", ".join(violations) or "none"))
    lines.append("import cycles: " + ("; ".join(" -> ".join(c) for c in loops) or "none"))
    lines.append(f"floor cycles: {len(floor_loops) or 'none'}")
    lines.extend(f"  {' -> '.join(loop)}: {', '.join(floor_ties(edges, loop))}" for loop in floor_loops)
    lines.append("imports hidden behind strings: " + (", ".join(hidden_imports()) or "none"))
    allowed = "; ".join(f"{m}.{f} ({why})" for (m, f), why in ALLOWED_DYNAMIC_IMPORTS.items())
    lines.append(f"allowed dynamic import: {allowed}")
    return "\n".join(lines)


def _imports(args) -> int:
    print(report())
    return 1 if env_violations() or cycles() or floor_cycles() or hidden_imports() else 0


def add_verbs(verbs) -> None:
    """`python -m lib imports` (registered by lib/__main__.py)."""
    i = verbs.add_parser(
        "imports",
        help="each generic module's workbook imports; fails on an environment import, a cycle (between modules or "
        "between floors) or an import hidden behind a string",
    )
    i.set_defaults(func=_imports)
