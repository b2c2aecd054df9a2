"""The layout the architecture promises: no import cycles in ``zabd``, no
private attribute reached across modules, no imports inside functions in the
server."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "zabd"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every zabd module this file imports, at any depth (also inside
    functions and TYPE_CHECKING blocks: a cycle broken that way is still a cycle)."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("zabd"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if base.startswith("zabd"):
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for name, path in files.items():
        g[name] = {m for m in imports_of(path) if m in files and m != name}
    return g


def test_no_import_cycles() -> None:
    g = graph()
    # a package's __init__ re-exporting its own modules is not a cycle of meaning
    for name in g:
        g[name] = {m for m in g[name] if not (m + ".").startswith(name + ".") and not name.startswith(m + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m) :], m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_lower_layers_import_nothing_above_them() -> None:
    above = {
        "zabd.protocol": ("zabd.sim", "zabd.server", "zabd.client", "zabd.storage", "zabd.kv", "zabd.codec"),
        "zabd.storage": ("zabd.sim", "zabd.server", "zabd.client", "zabd.kv", "zabd.codec", "zabd.pipeline"),
        "zabd.kv": ("zabd.sim", "zabd.server", "zabd.client", "zabd.storage", "zabd.pipeline"),
        "zabd.codec": ("zabd.server", "zabd.client", "zabd.storage", "zabd.sim", "zabd.pipeline"),
        "zabd.client": ("zabd.server",),
    }
    bad = []
    for name, deps in graph().items():
        for layer, forbidden in above.items():
            if name == layer or name.startswith(layer + "."):
                bad += [f"{name} imports {d}" for d in deps if d.startswith(forbidden)]
    assert not bad, bad


def test_server_modules_are_clean() -> None:
    # no line cap: a file is as long as its one job needs (DEVELOPERS.md)
    problems = []
    for path in sorted((PKG / "server").glob("*.py")):
        text = path.read_text()
        if "type: ignore" in text:
            problems.append(f"{path.name}: a type: ignore")
        # a private attribute of another object (not self/cls) reached from here
        for m in re.finditer(r"\b(?!self\b|cls\b)([a-z_][a-z0-9_]*)\._[a-z]\w*", text):
            line = text[: m.start()].count("\n") + 1
            problems.append(f"{path.name}:{line}: {m.group(0)}")
        if path.name != "cli.py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Import | ast.ImportFrom):
                            problems.append(f"{path.name}:{inner.lineno}: import inside {node.name}()")
    assert not problems, problems
