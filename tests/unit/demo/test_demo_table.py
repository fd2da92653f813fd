"""``make demo``'s table: a run that recorded no try prints the header alone instead of crashing."""

from __future__ import annotations

import pytest

from demo.run import Row, print_table

HEADER = ["dag", "task", "try", "state", "pod", "verdict", "reason", "created", "deleted", "retry_in"]


def test_an_empty_run_prints_the_header_and_rule_only(capsys: pytest.CaptureFixture[str]):
    print_table([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == HEADER
    assert lines[1].split() == ["-" * len(h) for h in HEADER]
    assert len(lines) == 2


def test_columns_are_as_wide_as_their_widest_cell(capsys: pytest.CaptureFixture[str]):
    rows = [
        Row("01_basic", "hello", 1, "success", "01-basic-hello-t1-abc", "succeed", "-", 1, 1),
        Row("02_image_pull_retry", "pull", 4, "failed", "p", "retry", "image.not_found", 1, 1),
    ]
    print_table(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == "-" * len("02_image_pull_retry")
    assert lines[1].split()[4] == "-" * len("01-basic-hello-t1-abc")
    # A blank line separates the DAGs; each cell starts where its header starts.
    assert lines[3] == ""
    start = lines[0].index("reason")
    assert lines[4][start:].startswith("image.not_found")
