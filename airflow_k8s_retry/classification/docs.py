"""The tables of ``docs/classification.md`` (and the reason codes of ``docs/failures-page.md``),
generated from ``RULES`` and ``REASONS``.

A doc keeps each table between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` markers; a test
checks that the docs hold exactly what this module generates, so they cannot drift from the code.
Regenerate with ``python -m airflow_k8s_retry.classification.docs docs/classification.md
docs/failures-page.md``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from airflow_k8s_retry.classification.model import REASONS, Outcome, Reason
from airflow_k8s_retry.classification.policy import DEFAULT_POLICY, DEFAULT_QUEUE_TIMEOUT
from airflow_k8s_retry.classification.rules import RULES, PolicyField, Rule, Seconds


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reason_cell(rule: Rule) -> str:
    if rule.waiting_reason is not None:
        return f"`{rule.waiting_reason.value}` while waiting, then `{rule.reason.value}`"
    return f"`{rule.reason.value}`"


def outcome_cell(rule: Rule) -> str:
    return "wait (re-check)" if rule.outcome is Outcome.WAIT else rule.outcome.value


def grace_cell(rule: Rule) -> str:
    if rule.grace is None:
        return "-"
    if isinstance(rule.grace, PolicyField) and rule.grace.name == "queue_timeout":
        text = f"{rule.grace}, unset: the task's `execution_timeout`, else {Seconds(DEFAULT_QUEUE_TIMEOUT)}"
    elif isinstance(rule.grace, PolicyField):
        text = f"{rule.grace}, {Seconds(rule.grace.resolve(DEFAULT_POLICY))}"
    else:
        text = str(rule.grace)
    if rule.extension is not None:
        text += f" (+ {rule.extension} while a node is being provisioned)"
    return text


def rules_table() -> str:
    lines = [
        "| # | rule | signal (what the matcher reads) | reason code | outcome | grace | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, rule in enumerate(RULES, start=1):
        cells = [
            str(number),
            f"`{rule.name}`",
            _cell(rule.signal),
            reason_cell(rule),
            outcome_cell(rule),
            grace_cell(rule),
            _cell(rule.why),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reasons_table() -> str:
    lines = ["| code | meaning | what to do (`hint_for`) |", "| --- | --- | --- |"]
    for reason in Reason:
        info = REASONS[reason]
        lines.append(f"| `{reason.value}` | {_cell(info.meaning)} | {_cell(info.hint)} |")
    return "\n".join(lines)


TABLES = {"rules": rules_table, "reasons": reasons_table}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN {name} -->\n)(.*?)(<!-- END {name} -->)", re.S)


def section(text: str, name: str) -> str | None:
    """The lines between the markers of table ``name`` in ``text``, or ``None`` if there are none."""
    found = _block(name).search(text)
    return found.group(2) if found else None


def render(text: str) -> str:
    """``text`` with every marked table replaced by its generated form."""
    marked = [name for name in TABLES if _block(name).search(text) is not None]
    if not marked:
        names = ", ".join(TABLES)
        raise ValueError(f"no <!-- BEGIN name --> ... <!-- END name --> markers in the doc (names: {names})")
    for name in marked:
        found = _block(name).search(text)
        assert found is not None
        text = text[: found.start(2)] + TABLES[name]() + "\n" + text[found.end(2) :]
    return text


def main(argv: list[str]) -> int:
    if not argv:
        print(
            "usage: python -m airflow_k8s_retry.classification.docs docs/classification.md "
            "[docs/failures-page.md ...]",
            file=sys.stderr,
        )
        return 2
    for name in argv:
        path = Path(name)
        path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
