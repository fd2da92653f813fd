"""The quick-start example in docs/simulator.md runs as written."""

from __future__ import annotations

import re

from tests.support.paths import REPO

DOC = REPO / "docs" / "simulator.md"


def test_quick_start_example_runs() -> None:
    text = DOC.read_text()
    example = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S)
    assert example, "docs/simulator.md has a Python quick-start block"
    code = example.group(1) + "\nassert cluster.request_counts()[('create', 'pods')] == 1\n"
    namespace: dict[str, object] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
