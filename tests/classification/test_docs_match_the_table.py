"""docs/classification.md lists every rule in table order and every reason code."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_k8s_retry.classification import RULES, Reason

DOC = Path(__file__).parents[2] / "docs" / "classification.md"


def test_every_rule_is_documented_in_order() -> None:
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", DOC.read_text(), flags=re.M)
    assert [name for _, name in rows] == [r.name for r in RULES]
    assert [int(n) for n, _ in rows] == list(range(1, len(RULES) + 1))


def test_every_reason_code_is_documented() -> None:
    text = DOC.read_text()
    missing = [r.value for r in Reason if f"| `{r.value}` |" not in text]
    assert not missing
