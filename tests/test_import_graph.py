"""The package's modules import one another without a circle: the imports at module level (those
that run when a module is imported, inside top-level ``if``/``try`` blocks too; not those inside
functions, which run later) give each module's edges to the package's modules it names, and the
graph must have no cycle. ``from . import units`` names ``cctestbed.units``, not the package."""

import ast
from pathlib import Path

import cctestbed

PACKAGE = Path(cctestbed.__file__).resolve().parent


def modules() -> dict[str, Path]:
    """Module name -> source; a compiled module (the core) by its type stub."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py*")):
        if f.suffix not in (".py", ".pyi"):
            continue
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.setdefault(".".join(parts), f)
    return out


def module_level_imports(tree: ast.Module) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def visit(body: list[ast.stmt]) -> None:
        for s in body:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                found.append(s)
            elif isinstance(s, ast.If):
                visit(s.body)
                visit(s.orelse)
            elif isinstance(s, ast.Try):
                visit(s.body)
                visit(s.orelse)
                visit(s.finalbody)
                for h in s.handlers:
                    visit(h.body)

    visit(tree.body)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for s in module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(s, ast.Import):
                out |= {a.name for a in s.names if a.name in mods}
                continue
            base = package.split(".")[: len(package.split(".")) - (s.level - 1)] if s.level else []
            target = ".".join(base + (s.module.split(".") if s.module else []))
            for a in s.names:
                # a submodule when it is one, else a name from the module itself
                t = f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                if t in mods:
                    out.add(t)
        out.discard(name)
        edges[name] = out
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_modules_import_one_another_without_a_circle():
    edges = graph()
    # the graph is read: the schema imports the units it parses and the core, the package its parts
    assert {"cctestbed.units", "cctestbed._core"} <= edges["cctestbed.config"]
    assert "cctestbed.config" in edges["cctestbed"]
    found = cycle(edges)
    assert found is None, "modules in a circle: " + " -> ".join(found or [])


def test_a_circle_is_found():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle(edges) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
