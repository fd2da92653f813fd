"""Figures the contributor's guide gives about the repository are counted, not remembered."""

from __future__ import annotations

import json
import re

from tests.support.paths import CORPUS, REPO


def test_the_corpus_figures_are_the_corpus() -> None:
    text = " ".join((REPO / "CONTRIBUTING.md").read_text().split())
    said = re.search(
        r"corpus \((\d+) pod JSON files, one per real-world case, (\d+) quoting their public source\)", text
    )
    assert said, "CONTRIBUTING.md: the sentence giving the corpus' size is missing"
    cases = [json.loads(path.read_text()) for path in sorted(CORPUS.glob("*.json"))]
    assert int(said[1]) == len(cases), f"CONTRIBUTING.md: the corpus has {len(cases)} cases"
    sourced = sum("source" in case for case in cases)
    assert int(said[2]) == sourced, f"CONTRIBUTING.md: {sourced} corpus cases quote their source"
