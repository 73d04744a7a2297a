"""House rules the linters do not check, kept true by a test: no class over 400 lines and no function over 80
anywhere in the repository's Python (developers' guide), no import circle between modules (function-level imports
included: they are how a circle hides), and every benchmark script still imports (they sit outside mypy's
packages, so a renamed name would break them unseen until someone runs them)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

# The repository: the nearest folder above this test holding pyproject.toml (the test may sit at any depth).
from paths import ROOT

PACKAGES = ("processor", "sandbox", "consumers", "producers", "schemas")
MAX_CLASS_LINES = 400


def class_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, length in lines) of every class in `source`, nested ones included."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    ]


def test_class_lengths_are_measured_from_the_class_line_to_its_last() -> None:
    source = "class A:\n    x = 1\n\n    def f(self) -> None:\n        pass\n\n\n"
    source += "class B:\n    class C:\n        y = 2\n"
    assert class_lengths(source) == [("A", 1, 5), ("B", 8, 3), ("C", 9, 2)]


def test_no_class_is_over_400_lines() -> None:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert files, f"no Python files found under {ROOT}"
    too_long = [
        f"{path.relative_to(ROOT)}:{line} class {name} has {length} lines"
        for path in files
        for name, line, length in class_lengths(path.read_text())
        if length > MAX_CLASS_LINES
    ]
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines (split them by concern):\n" + "\n".join(too_long)


MAX_FUNCTION_LINES = 80
# Folders that are not the project's code: virtual environments, tool caches, VCS data, build output.
NOT_OURS = {"node_modules", "site-packages", "__pycache__", "build", "dist"}


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, line of `def`, length in lines) of every function in `source`, methods and nested ones included;
    decorators are not counted."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_function_lengths_are_measured_from_the_def_line_to_its_last_decorators_excluded() -> None:
    source = "@decorator\ndef f() -> None:\n    pass\n\n\nasync def g() -> None:\n    def h() -> None:\n"
    source += "        pass\n\n    return None\n\n\nclass A:\n    def m(self) -> int:\n        return 1\n"
    assert sorted(function_lengths(source)) == [("f", 2, 2), ("g", 6, 5), ("h", 7, 2), ("m", 14, 2)]


def python_files(root: Path) -> list[Path]:
    """Every .py file below `root` but in hidden folders (.venv, .git, caches), virtual environments (a
    `pyvenv.cfg`), egg-info and the folders of NOT_OURS."""
    found: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(
            name
            for name in subfolders
            if not name.startswith(".")
            and name not in NOT_OURS
            and not name.endswith(".egg-info")
            and not (Path(folder) / name / "pyvenv.cfg").exists()
        )
        found += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    return found


def test_python_files_leave_out_virtual_environments_and_hidden_folders(tmp_path: Path) -> None:
    for path in ("pkg/a.py", "pkg/sub/b.py", ".venv/lib/c.py", "env/pyvenv.cfg", "env/lib/d.py", ".git/e.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "pkg/notes.txt").write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in python_files(tmp_path)] == ["pkg/a.py", "pkg/sub/b.py"]


def test_no_function_is_over_80_lines() -> None:
    files = python_files(ROOT)
    assert {"processor", "sandbox", "benchmarks", "tests"} <= {p.relative_to(ROOT).parts[0] for p in files}
    too_long = [
        f"{path.relative_to(ROOT)}:{line} {name} has {length} lines"
        for path in files
        for name, line, length in function_lengths(path.read_text())
        if length > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(
        too_long
    )


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a module graph (`module -> modules it imports`): its strongly connected components
    of more than one module, each sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circles_are_found_and_a_chain_is_none() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_between_modules() -> None:
    graph = grimp.build_graph(*(package for package in PACKAGES if (ROOT / package).is_dir()), cache_dir=None)
    imports = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    assert circles(imports) == [], "modules that import each other, directly or through others"


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")))
def test_every_benchmark_script_imports(script: str) -> None:
    # A child process: the scripts import each other by module name from their own folder, as when run.
    done = subprocess.run(
        [sys.executable, "-c", f"import {script}"],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
