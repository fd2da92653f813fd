"""Where things are in the repository, for tests at any depth."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The classification corpus: one pod JSON file per real-world case.
CORPUS = REPO / "tests" / "unit" / "classification" / "corpus"
