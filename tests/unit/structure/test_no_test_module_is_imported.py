"""No file imports a test module or a conftest: what several test files share lives in
``tests/support`` (or in a helper module of the one tier that uses it), so a test file can be moved,
renamed or deleted without breaking another.

import-linter cannot name "every module called ``test_*``", so this reads the imports itself:
every ``import`` and ``from ... import`` statement, at any depth (the lazy ones inside functions
too), of every Python file of the repository's trees. That bench/ and tools/ import nothing from
tests/ is import-linter's to keep (its contracts in pyproject.toml).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

#: The repository's Python trees.
TREES = ("airflow_k8s_retry", "simulator", "tools", "bench", "demo", "dags", "docs", "tests")


def is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


def module_file(dotted: str) -> Path | None:
    """The repository's file of module ``dotted``, if it is one of them (a package's ``__init__``
    counts as the package)."""
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(source: str, package: str) -> set[str]:
    """The dotted names a module of ``package`` whose text is ``source`` imports: each module, and
    each name imported from a module (which may itself be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{anchor}.{module}" if module else anchor
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def imported_test_modules(path: Path, source: str | None = None) -> list[str]:
    """The test modules and conftests (as paths in the repository) that the file ``path`` imports."""
    package = ".".join(path.relative_to(REPO).parts[:-1])
    text = path.read_text(encoding="utf-8") if source is None else source
    names = [name for name in imported(text, package) if name.startswith("tests.")]  # where they live
    targets = {module_file(name) for name in names} - {None, path}
    return sorted(str(t.relative_to(REPO)) for t in targets if t is not None and is_test_module(t))


def test_no_file_imports_a_test_module_or_a_conftest() -> None:
    files = [path for tree in TREES for path in sorted((REPO / tree).rglob("*.py"))]
    assert len(files) > 300, "the repository's Python files were not found"
    offending = {
        str(path.relative_to(REPO)): found for path in files if (found := imported_test_modules(path))
    }
    assert offending == {}, (
        "these files import a test module or a conftest; move what they share to tests/support (or "
        f"to a helper module of the tier that alone uses it): {offending}"
    )


def test_the_check_sees_every_form_of_import() -> None:
    source = (
        "import tests.unit.conftest\n"
        "from tests.simulated.operator import test_operator_lifecycle\n"
        "from .test_package_structure import MAX_MODULE_LINES\n"
        "from tests.support.lab import Run\n"
        "def later():\n"
        "    from tests.simulated.watching.test_least_privilege_rbac import granted\n"
    )
    here = REPO / "tests" / "unit" / "structure" / "a_helper.py"
    assert imported_test_modules(here, source) == [
        "tests/simulated/operator/test_operator_lifecycle.py",
        "tests/simulated/watching/test_least_privilege_rbac.py",
        "tests/unit/conftest.py",
        "tests/unit/structure/test_package_structure.py",
    ]
