"""The house's layout holds: agentops (the wiring) above the apps, the apps above agentkit
(the agent library); approvals above runs; the engine, tools, providers and consumers each
import only what their job needs; no import hides in a function.

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
    "evals",
    "agentops",
    "agentkit",
    "accounts",
    "demo",
    "triggers",
    "gateway",
)
# The apps: everything but the project's wiring (agentops) and the library (agentkit).
APPS = ("runs", "approvals", "history", "evals", "accounts", "demo", "triggers", "gateway")

# Imports inside functions that are not there to break a cycle, and why.
DEFERRED_IMPORTS = {
    # AppConfig.ready(): Django's place for registering things once the models are loaded.
    ("runs/apps.py", "runs.tasks"),
    ("agentops/apps.py", "agentops.metrics_server"),
    ("runs/apps.py", "runs.events"),
    ("runs/apps.py", "runs.access"),
    ("runs/apps.py", "runs.chains"),
    ("runs/apps.py", "runs.compensation"),
    ("runs/apps.py", "runs.compensation.effects"),
    ("runs/apps.py", "runs.compensation.models"),
    ("runs/apps.py", "runs.pending"),
    ("runs/apps.py", "runs.pending.models"),
    ("runs/apps.py", "runs.steering"),
    ("runs/apps.py", "runs.steering.models"),
    ("runs/apps.py", "runs.models"),
    ("approvals/apps.py", "runs.engine"),
    ("approvals/apps.py", "approvals.engine_gates"),
    ("approvals/apps.py", "approvals.gates"),
    ("approvals/apps.py", "approvals.gates.checks"),
    ("approvals/apps.py", "approvals.decisions"),
    ("approvals/apps.py", "approvals.tasks"),
    ("approvals/apps.py", "approvals.models"),
    ("approvals/apps.py", "approvals.learning"),
    ("approvals/apps.py", "approvals.learning.rules"),
    ("approvals/apps.py", "runs.models"),
    ("demo/apps.py", "demo.agents"),
    ("demo/apps.py", "demo.planning_agent"),
    ("accounts/apps.py", "accounts.lockouts"),
    ("accounts/apps.py", "accounts.sso"),
    ("accounts/apps.py", "accounts.security_events"),
    ("gateway/apps.py", "accounts.teams"),
    ("gateway/apps.py", "approvals.models"),
    ("gateway/apps.py", "gateway.call_tools"),
    ("gateway/apps.py", "gateway.models"),
    ("gateway/apps.py", "gateway.callbacks"),
    ("gateway/apps.py", "gateway.wakeups"),
    ("gateway/apps.py", "gateway.sessions"),
    ("gateway/apps.py", "gateway.tasks"),
    ("gateway/apps.py", "approvals.decisions"),
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


def _reach(names, modules: dict[str, Path]) -> set[str]:
    """The given modules and every project module they import, directly or not."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _project_imports(name, modules)
    return seen


def _imports_of(names, modules: dict[str, Path]) -> set[tuple[str, str]]:
    """(module, what it imports) for each import of the given modules, project or not."""
    return {(name, imported) for name in names for imported, _ in _imports(name, modules[name])}


def _top(module: str) -> str:
    return module.partition(".")[0]


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


def test_nothing_below_imports_evals():
    """Regression datasets and runs (evals) stand above runs and approvals: they read
    decisions and drive the engine through its replay hook; neither knows of them."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith(("runs", "approvals", "accounts", "history", "agentkit"))
        for imported, _ in _imports(name, path)
        if imported.startswith("evals")
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


# runs/sql.py is for the hot paths it names: the engine, the run's timeline, the gateway's
# sessions. Everything else goes through the ORM.
HAND_BUILT_SQL_CALLERS = ("runs.engine", "runs.models.timeline", "gateway.sessions")


def test_only_the_hot_paths_write_through_hand_built_sql():
    modules = _modules()
    callers = {
        name
        for name, path in modules.items()
        for imported, _ in _imports(name, path)
        if imported == "runs.sql" and name != "runs.sql"
    }
    assert callers
    assert {name for name in callers if not _in(name, HAND_BUILT_SQL_CALLERS)} == set()


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


# The run model's parts (runs/models/), each importing only parts of a lower rank: the plain
# values at the bottom, the timeline's rows, the Run's behaviour, the Run, then the models of
# the run-level features, which name the Run. Only the package's __init__ gathers them all.
RUN_MODEL_PARTS = {
    "canonical": 0,
    "choices": 0,
    "signals": 0,
    "limits": 0,
    "queries": 1,
    "step": 1,
    "timeline": 2,
    "run_status": 3,
    "run_resume": 3,
    "run": 4,
    "costs": 5,
    "ledger": 5,
    "pending": 5,
    "rate_limits": 5,
    "steering": 5,
    "retention": 5,
}


def _run_model_parts(modules: dict[str, Path]) -> list[str]:
    return [m for m in modules if m.startswith("runs.models.")]


def test_every_part_of_the_run_model_has_its_rank():
    parts = {m.removeprefix("runs.models.") for m in _run_model_parts(_modules())}
    assert parts == set(RUN_MODEL_PARTS)


def test_the_run_model_parts_import_downward_only():
    """A part of the run model imports only parts below it: the behaviour (status, resume,
    timeline) never imports the Run it is part of, the Run never a feature's model."""
    modules = _modules()
    upward = sorted(
        (name, imported)
        for name in _run_model_parts(modules)
        for imported in _project_imports(name, modules)
        if imported.startswith("runs.models.")
        if RUN_MODEL_PARTS[imported.removeprefix("runs.models.")]
        >= RUN_MODEL_PARTS[name.removeprefix("runs.models.")]
    )
    assert not upward, upward


def test_the_run_model_reaches_no_engine_and_no_app_above_runs():
    """The run model is what the engine and the apps above runs build on: nothing it reaches,
    at any depth, is the engine, a view, or an app above runs."""
    modules = _modules()
    reached = _reach(["runs.models", *_run_model_parts(modules)], modules)
    above = ("runs.engine", "approvals", "gateway", "triggers", "history", "evals", "demo")
    found = sorted(m for m in reached if _in(m, above) or m.rpartition(".")[2] in ("views", "api"))
    assert not found, found


APPROVALS_WINGS = ("approvals.notify", "approvals.learning")
# The app's wiring may reach into the wings (approvals/__init__.py says why each does).
APPROVALS_CORE_WIRING = {
    "approvals.apps",
    "approvals.urls",
    "approvals.tasks",
    "approvals.models",
    "approvals.api",
    "approvals.templatetags.approval_tags",
    "approvals.templatetags.learning_tags",
}
# Not yet a hook the wing plugs into: the gate cascade asks the learned rules directly.
APPROVALS_CORE_TO_WING_LEFT = {
    ("approvals.gates.cascade", "approvals.learning"),
    ("approvals.gates.cascade", "approvals.learning.rules"),
}


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_approvals_core_imports_no_wing_outside_its_wiring():
    """approvals/notify/ and approvals/learning/ stand on the core; the core reaches them only
    through its wiring (apps, urls, tasks, models, api, templatetags) and signals."""
    modules = _modules()
    reach = {
        (name, imported)
        for name, path in modules.items()
        if name.startswith("approvals") and not _in(name, APPROVALS_WINGS)
        if name not in APPROVALS_CORE_WIRING
        for imported, _ in _imports(name, path)
        if imported in modules and _in(imported, APPROVALS_WINGS)
    }
    assert reach <= APPROVALS_CORE_TO_WING_LEFT, sorted(reach - APPROVALS_CORE_TO_WING_LEFT)


def test_the_approvals_wings_import_each_other_not():
    modules = _modules()
    across = {
        (name, imported)
        for name, path in modules.items()
        for wing, other in (APPROVALS_WINGS, APPROVALS_WINGS[::-1])
        if _in(name, (wing,))
        for imported, _ in _imports(name, path)
        if _in(imported, (other,))
    }
    assert not across


def test_the_library_imports_no_app():
    """agentkit is what the apps are built from: it imports none of them (nor their models),
    and nothing of the project's wiring; what it needs from an app is registered at start-up
    (agents, tools)."""
    modules = _modules()
    upward = {
        (name, imported)
        for name, imported in _imports_of([m for m in modules if _top(m) == "agentkit"], modules)
        if _top(imported) in (*APPS, "agentops")
    }
    assert not upward, f"the library imports apps: {sorted(upward)}"


# Apps that import the project package, and why. The Celery app is the project's (celery -A
# agentops), and runs/queue.py sends through it by name: Celery's "current app" is per thread,
# so a worker thread would find Celery's default app instead.
APP_IMPORTS_OF_THE_PROJECT = {("runs.queue", "agentops.celery")}


def test_no_app_imports_the_project_package():
    """agentops wires the apps together: it imports them, they do not import it."""
    modules = _modules()
    apps = [m for m in modules if _top(m) in APPS]
    upward = {
        (name, imported.removesuffix(".app"))
        for name, imported in _imports_of(apps, modules)
        if _top(imported) == "agentops"
    }
    assert not upward - APP_IMPORTS_OF_THE_PROJECT, (
        f"apps import the project package: {sorted(upward - APP_IMPORTS_OF_THE_PROJECT)}"
    )


def test_llm_providers_import_no_orm():
    """A model provider turns a request into a response: no database, no model of an app, at
    any depth (the engine records what it answers)."""
    modules = _modules()
    providers = _reach([m for m in modules if m.startswith("agentkit.llm")], modules)
    orm = {
        (name, imported)
        for name, imported in _imports_of(providers, modules)
        if imported.startswith("django.db") or ".models" in f".{imported}"
    }
    assert not orm, f"LLM providers reach the ORM: {sorted(orm)}"


def test_tools_import_no_engine():
    """A tool is called by the engine, never calls it: the library's tool registry and every
    app's tools (demo/tools.py, gateway/call_tools.py, gateway/mcp_tools.py) reach no part of
    runs/engine/."""
    modules = _modules()
    tools = [
        m
        for m in modules
        if m.rpartition(".")[2] in ("tools", "call_tools", "mcp_tools")
        and not m.startswith("runs.engine")
    ]
    assert "agentkit.tools" in tools
    reached = {m for m in _reach(tools, modules) if m.startswith("runs.engine")}
    assert not reached, f"tools reach the engine: {sorted(reached)}"


def test_consumers_import_no_engine():
    """A consumer forwards what the engine published (ids -> objects -> a frame): it reaches
    no part of runs/engine/, so a socket never runs a step."""
    modules = _modules()
    consumers = [m for m in modules if m.rpartition(".")[2] == "consumers"]
    assert consumers
    reached = {m for m in _reach(consumers, modules) if m.startswith("runs.engine")}
    assert not reached, f"consumers reach the engine: {sorted(reached)}"


def test_the_engine_imports_no_views_or_templates():
    """The engine writes steps; what a page shows is rendered elsewhere (runs/rendering.py,
    after commit). Nothing it reaches imports a view, a template tag or django.template."""
    modules = _modules()
    engine = _reach([m for m in modules if m.startswith("runs.engine")], modules)

    def presentation(module: str) -> bool:
        last = module.rpartition(".")[2]
        return (
            module.startswith(("django.template", "django.shortcuts"))
            or last == "views"
            or last.endswith("_views")
            or ".templatetags" in module
            or ".views." in module
        )

    found = {(n, i) for n, i in _imports_of(engine, modules) if presentation(i)}
    assert not found, f"the engine reaches views or templates: {sorted(found)}"


# The gate decision's pure rules: plain functions of their arguments, tested without a database.
PURE_GATE_RULES = (
    "approvals.gates.policy",
    "approvals.gates.config",
    "approvals.plans.rules",
    "approvals.grants.rules",
)
NOT_PURE = ("django.db", "django.contrib.auth", "django.apps", "django.core.checks")


def _is_model_module(name: str) -> bool:
    return name.endswith(".models") or ".models." in name or name == "models"


def test_the_gate_rules_import_no_model():
    """The pure rules import no Django model and no database module, directly or through any
    project module they import."""
    modules = _modules()
    reached = _reach(PURE_GATE_RULES, modules)
    found = sorted(
        (name, imported)
        for name, imported in _imports_of(reached, modules)
        if _is_model_module(imported) or any(_in(imported, (bad,)) for bad in NOT_PURE)
    )
    assert not found, found


def test_the_gate_config_knows_the_roles_accounts_has():
    """gates/config.py names the approver groups without importing accounts.models."""
    from accounts.models import Role
    from approvals.gates.config import ROLES

    assert tuple(Role.values) == ROLES
