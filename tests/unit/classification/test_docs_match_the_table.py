"""docs/classification.md shows the rule table and the reason codes exactly as the code has them, and
docs/failures-page.md the reason codes."""

from __future__ import annotations

import re

from airflow_k8s_retry.classification import DEFAULT_POLICY, REASONS, RULES, Outcome, Reason, rule_grace
from airflow_k8s_retry.classification.docs import reasons_table, render, rules_table, section
from tests.support.paths import REPO

DOC = REPO / "docs" / "classification.md"
FAILURES_PAGE = REPO / "docs" / "failures-page.md"


def rows(name: str) -> list[list[str]]:
    text = section(DOC.read_text(), name)
    assert text is not None, f"the doc has no {name} table markers"
    lines = [line for line in text.splitlines() if line.startswith("| ")][2:]  # skip header and rule
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_the_doc_holds_the_generated_tables() -> None:
    text = DOC.read_text()
    assert section(text, "rules") == rules_table() + "\n"
    assert section(text, "reasons") == reasons_table() + "\n"
    assert render(text) == text, "run: python -m airflow_k8s_retry.classification.docs docs/classification.md"


def test_the_failures_page_doc_lists_every_reason_code_with_its_meaning_and_hint() -> None:
    text = FAILURES_PAGE.read_text()
    assert section(text, "reasons") == reasons_table() + "\n"
    assert render(text) == text, "run: python -m airflow_k8s_retry.classification.docs docs/failures-page.md"


def test_every_column_of_every_rule_row_matches_rules() -> None:
    table = rows("rules")
    assert len(table) == len(RULES)
    for number, (row, rule) in enumerate(zip(table, RULES, strict=True), start=1):
        index, name, signal, reason, outcome, grace, why = row
        assert (index, name) == (str(number), f"`{rule.name}`")
        assert signal.replace("\\|", "|") == rule.signal
        assert f"`{rule.reason.value}`" in reason
        if rule.waiting_reason is not None:
            assert f"`{rule.waiting_reason.value}` while waiting" in reason
        assert outcome == ("wait (re-check)" if rule.outcome is Outcome.WAIT else rule.outcome.value)
        seconds = rule_grace(rule, DEFAULT_POLICY)
        if seconds is None:
            assert grace == "-"
        else:
            minutes, secs = divmod(round(seconds), 60)
            hours, odd = divmod(minutes, 60)
            shown = f"{hours} h" if hours and not odd and not secs else None
            shown = shown or (f"{minutes} min" if minutes and not secs else f"{round(seconds)} s")
            assert shown in grace, rule.name
        assert why.replace("\\|", "|") == rule.why


def test_every_reason_code_is_documented_with_its_hint() -> None:
    table = {row[0]: row for row in rows("reasons")}
    assert set(table) == {f"`{r.value}`" for r in Reason}
    for reason in Reason:
        _, meaning, hint = table[f"`{reason.value}`"]
        assert (meaning, hint) == (REASONS[reason].meaning, REASONS[reason].hint)
