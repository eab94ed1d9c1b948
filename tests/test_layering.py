"""The house's layout holds: approvals stands above runs, and no import hides in a function.

Read from the source (ast), so a module that imports approvals only on some path still
counts.
"""

import ast
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
PACKAGES = (
    "runs",
    "approvals",
    "history",
    "agentops",
    "agentkit",
    "accounts",
    "demo",
    "triggers",
    "gateway",
)

# Imports inside functions that are not there to break a cycle, and why.
DEFERRED_IMPORTS = {
    # AppConfig.ready(): Django's place for registering things once the models are loaded.
    ("runs/apps.py", "runs.tasks"),
    ("runs/apps.py", "runs.events"),
    ("runs/apps.py", "runs.access"),
    ("runs/apps.py", "runs.chains"),
    ("runs/apps.py", "runs.pending"),
    ("runs/apps.py", "runs.models"),
    ("approvals/apps.py", "runs.engine"),
    ("approvals/apps.py", "approvals.gates"),
    ("approvals/apps.py", "approvals.gate_config"),
    ("approvals/apps.py", "approvals.decisions"),
    ("approvals/apps.py", "approvals.tasks"),
    ("approvals/apps.py", "approvals.models"),
    ("approvals/apps.py", "runs.models"),
    ("demo/apps.py", "demo.agents"),
    ("accounts/apps.py", "accounts.lockouts"),
    ("gateway/apps.py", "approvals.models"),
    ("gateway/apps.py", "gateway.tools"),
    ("gateway/apps.py", "gateway.callbacks"),
    ("gateway/apps.py", "gateway.wakeups"),
    ("gateway/apps.py", "runs.models"),
    # The Anthropic SDK: a web process never needs its import time and memory.
    ("agentkit/agents.py", "agentkit.llm.anthropic"),
    ("agentops/celery.py", "agentkit.llm.anthropic"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, whether the import is inside a function) for each import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text())
    nested = {
        id(node)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(func)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in nested) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # `from pkg import module` imports the module too.
            out.append((base, id(node) in nested))
            out += [(f"{base}.{alias.name}", id(node) in nested) for alias in node.names]
    return out


def _project_imports(name: str, modules: dict[str, Path]) -> set[str]:
    return {m for m, _ in _imports(name, modules[name]) if m in modules}


def test_the_engine_imports_nothing_of_approvals():
    modules = _modules()
    seen, todo = set(), [m for m in modules if m.startswith("runs.engine")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += _project_imports(name, modules)
    assert not {m for m in seen if m.startswith("approvals")}


def test_runs_imports_nothing_of_approvals():
    """approvals stands above runs: an approval belongs to a run, never the reverse."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith("runs")
        for imported, _ in _imports(name, path)
        if imported.startswith("approvals")
    }
    assert not upward


def test_nothing_below_imports_history():
    """history (fork, replay, export and import) stands above runs and approvals: it drives
    the engine and reads runs; neither knows of it."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith(("runs", "approvals", "accounts"))
        for imported, _ in _imports(name, path)
        if imported.startswith("history")
    }
    assert not upward


def test_runs_and_approvals_import_nothing_of_triggers():
    """Triggers (webhooks, schedules) stand above runs: they launch through the engine."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith(("runs", "approvals"))
        for imported, _ in _imports(name, path)
        if imported.startswith("triggers")
    }
    assert not upward


def test_nothing_below_imports_the_gateway():
    """The gateway (external agents) stands above runs and approvals: it opens approvals of
    runs; neither knows of it (approvals asks its registered tool finder)."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith(("runs", "approvals", "accounts", "triggers", "history"))
        for imported, _ in _imports(name, path)
        if imported.startswith("gateway")
    }
    assert not upward


def test_no_import_hides_inside_a_function():
    """A project module imported inside a function is how a circle hides; the few deferred
    for another reason are listed above with it."""
    modules = _modules()
    hidden = {
        (str(path.relative_to(ROOT)), imported)
        for name, path in modules.items()
        for imported, nested in _imports(name, path)
        # `from runs import engine` names the package too; the module is what counts.
        if nested and imported in modules and modules[imported].name != "__init__.py"
    }
    assert not hidden - DEFERRED_IMPORTS, (
        f"imports inside functions: {sorted(hidden - DEFERRED_IMPORTS)}"
    )


def test_no_circle_between_project_modules():
    modules = _modules()
    graph = {name: _project_imports(name, modules) - {name} for name in modules}
    # A package's __init__ re-exporting its own parts is not a circle.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    circles = []
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in graph[name]:
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, f"import circles: {circles}"
