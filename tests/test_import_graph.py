"""The package's import graph, read from the source: no module imports itself through others (not even inside a
function), and what Airflow loads in its own processes -- the DAG file and the reconciliation view -- reaches no
pyspark through its module-level imports."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "cdcreplay": REPO / "jobs" / "cdcreplay",
    "cdcreplay_lab": REPO / "jobs" / "cdcreplay_lab",
    "cdcreplay_ui": REPO / "plugins" / "cdcreplay_ui",
}


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


MODULES = module_files()


def imports_of(path: Path, module: str, top_level_only: bool) -> set[str]:
    """The modules ``path`` imports: all of them, or only those its module body imports when it is loaded."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                package = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:  # `from package import module` imports the module, not the package's names
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return found


def product_graph(top_level_only: bool) -> dict[str, set[str]]:
    return {
        module: {name for name in imports_of(path, module, top_level_only) if name in MODULES}
        for module, path in MODULES.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def loaded_with(path: Path, module: str) -> set[str]:
    """Every module, product or not, that loading ``path`` imports through the product's module-level imports."""
    graph = product_graph(top_level_only=True)
    seen, todo, reached = set(), [*imports_of(path, module, top_level_only=True)], set()
    while todo:
        name = todo.pop()
        reached.add(name)
        owner = name if name in MODULES else None
        if owner is None or owner in seen:
            continue
        seen.add(owner)
        todo.extend(imports_of(MODULES[owner], owner, top_level_only=True) - reached)
        todo.extend(graph[owner] - seen)
        # Importing a module runs its packages' __init__ first (cdcreplay.explain.story loads cdcreplay.explain).
        parts = owner.split(".")
        todo.extend(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in MODULES and p not in seen)
    return reached


def test_no_module_imports_itself_through_others():
    assert cycles(product_graph(top_level_only=False)) == []


def test_a_cycle_is_found_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_dag_and_the_view_load_no_pyspark():
    loaded = {
        "dags/cdc_replay_nightly.py": loaded_with(REPO / "dags" / "cdc_replay_nightly.py", "cdc_replay_nightly"),
        **{module: loaded_with(path, module) for module, path in MODULES.items() if module.startswith("cdcreplay_ui")},
    }
    heavy = {name: sorted(m for m in modules if m.split(".")[0] == "pyspark") for name, modules in loaded.items()}
    assert {name: found for name, found in heavy.items() if found} == {}
    assert "cdcreplay.contracts" in loaded["dags/cdc_replay_nightly.py"]  # the DAG's names are the product's own
    # What the check would see: loading the pipeline loads Spark (through its own imports and the modules' it uses).
    assert "pyspark.sql" in loaded_with(MODULES["cdcreplay.pipeline"], "cdcreplay.pipeline")


def reached_from(*modules: str) -> set[str]:
    """Every product module that running ``modules`` may import, at load time or inside a function."""
    graph = product_graph(top_level_only=False)
    reached, todo = set(), list(modules)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    return reached


def test_the_jobs_import_no_lab_code():
    """The package the cluster receives (``cdcreplay package``) is cdcreplay alone: the jobs must not need the lab."""
    # The decoders are found by format id at run time (formats.decoder_module): every one is a root.
    decoders = [module for module in MODULES if module.startswith("cdcreplay.formats.")]
    jobs = reached_from("cdcreplay.entrypoints", *decoders)
    assert {m for m in jobs if not m.startswith("cdcreplay.")} == set()
    assert {"cdcreplay.pipeline", "cdcreplay.reconcile", "cdcreplay.storage", "cdcreplay.typed_tables"} <= jobs
