"""The layers hold: `lint-imports` keeps the contracts of pyproject.toml, no module imports its way back to itself,
and no function of `boe` is more complex than radon's cyclomatic complexity 25."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
from radon.complexity import cc_visit

import boe

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: Modules below everything (they import nothing of boe).
LEAVES = {"boe.errors", "boe.logs", "boe.util"}
#: What the pure core may import outside itself (not the logger: the core does no I/O).
CORE_MAY = {"boe.errors", "boe.util"}
MAX_COMPLEXITY = 25


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _children() -> set[str]:
    return {f"boe.{m.name}" for m in pkgutil.iter_modules(boe.__path__)} - {"boe.__main__"}


def test_lint_imports_keeps_every_contract() -> None:
    proc = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in proc.stdout, proc.stdout


def test_the_contracts_name_every_package() -> None:
    """A new top-level module or package of boe is in the core's forbidden list (and the leaves') from day one."""
    contracts = {
        tuple(c["source_modules"]): set(c["forbidden_modules"])
        for c in _contracts().values()  # type: ignore[arg-type]
        if c["type"] == "forbidden"
    }
    assert contracts[("boe.core",)] == _children() - {"boe.core"} - CORE_MAY
    assert contracts[tuple(sorted(LEAVES))] == _children() - LEAVES


def test_function_level_imports_count(tmp_path: Path) -> None:
    """An import inside a function breaks a contract as one at the top of the module does."""
    pkg = tmp_path / "layered"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high.py").write_text("VALUE = 1\n")
    (pkg / "low.py").write_text("def value():\n    from layered.high import VALUE\n\n    return VALUE\n")
    (tmp_path / "contracts.toml").write_text(
        '[tool.importlinter]\nroot_package = "layered"\n\n[[tool.importlinter.contracts]]\nname = "low below high"\n'
        'type = "forbidden"\nsource_modules = ["layered.low"]\nforbidden_modules = ["layered.high"]\n'
    )
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--config", "contracts.toml", "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1 and "layered.low -> layered.high (l.2)" in proc.stdout, proc.stdout + proc.stderr


def test_no_module_imports_its_way_back() -> None:
    """No cycle of imports between modules, package ``__init__`` modules included (the acyclic-siblings contract
    compares siblings only)."""
    graph = grimp.build_graph("boe")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not cycles, "modules that import each other (directly or through others): " + "; ".join(
        ", ".join(c) for c in cycles
    )


def _functions(blocks: list, prefix: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, line, complexity) of every function and method, nested ones included (radon lists the
    methods of a top-level class beside it; those of a nested class only under it)."""
    out = []
    for b in blocks:
        if hasattr(b, "methods"):  # a class: its nested classes
            out += _functions([*b.inner_classes], f"{prefix}{b.name}.")
            if prefix:
                out += _functions(b.methods, f"{prefix}{b.name}.")
        else:
            name = f"{prefix}{b.fullname}" if not prefix else f"{prefix}{b.name}"
            out.append((name, b.lineno, b.complexity))
            out += _functions(b.closures, f"{name}.")
    return out


def test_no_function_above_complexity_25() -> None:
    over = [
        f"{path.relative_to(ROOT)}:{line} {name} ({cc})"
        for path in sorted((ROOT / "boe").rglob("*.py"))
        for name, line, cc in _functions(cc_visit(path.read_text(encoding="utf-8")))
        if cc > MAX_COMPLEXITY
    ]
    assert not over, f"functions above cyclomatic complexity {MAX_COMPLEXITY} (radon): " + ", ".join(over)
