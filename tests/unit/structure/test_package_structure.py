"""Guard rails for the package's structure: no module grows past what one reader holds at once.

Complexity is ruff's C901 (``max-complexity = 10`` in pyproject.toml); module size has no ruff rule,
so it is checked here.
"""

from __future__ import annotations

from pathlib import Path

import airflow_k8s_retry
import airflow_k8s_retry_testing

#: The most lines a module of the package may have.
MAX_MODULE_LINES = 1000

#: The provider and the simulator's distribution.
PACKAGES = [Path(p.__file__).parent for p in (airflow_k8s_retry, airflow_k8s_retry_testing)]


def test_no_module_of_the_package_is_over_the_size_limit() -> None:
    sizes = {
        f"{package.name}/{path.relative_to(package)}": len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
    }
    assert len(sizes) > 100, "the packages' modules were not found"
    too_big = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert too_big == {}, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {too_big}"
