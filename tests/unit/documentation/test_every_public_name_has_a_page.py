"""The README's public-surface table and the documentation site's reference pages agree: every name
in the table links to a page that exists, every reference page has its row, and the committed
pages are the ones ``make docs`` writes from the public modules' exports."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

README = REPO / "README.md"
API = REPO / "docs" / "api"
LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>[^)]+)\)")


def api_pages() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_pages", REPO / "docs" / "_ext" / "api_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def surface_rows(text: str) -> list[str]:
    """The first cell of each row of the README's public-surface table."""
    section = text.split("## Public surface", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]]


def test_every_name_in_the_readmes_table_links_to_its_page() -> None:
    rows = surface_rows(README.read_text())
    assert len(rows) >= 10
    for cell in rows:
        links = list(LINK.finditer(cell))
        assert links, f"README, public surface: {cell!r} links to no page"
        for link in links:
            target = REPO / link["target"].split("#")[0]
            assert target.is_file(), (
                f"README, public surface: {link['text']!r} links to {link['target']}, not a page"
            )
            if target.parent == API:
                # A reference page is named for the dotted name it documents (the decorator's page is
                # its function's, retrying_kubernetes_task).
                said = link["text"].strip("`").removesuffix("()").rpartition(".")[2]
                documented = target.stem.rpartition(".")[2]
                assert documented.startswith(said), (
                    f"README: {link['text']!r} links to the page of {target.stem}"
                )


def test_every_reference_page_has_its_row_in_the_readme() -> None:
    linked = {Path(m["target"]).name for m in LINK.finditer(README.read_text())}
    pages = {path.name for path in API.glob("*.md")} - {"index.md"}
    assert pages - linked == set(), "reference pages the README's public-surface table does not link to"


def test_the_committed_reference_pages_are_the_generated_ones() -> None:
    wanted = api_pages().pages()
    committed = {path.name: path.read_text() for path in API.glob("*.md")}
    assert sorted(committed) == sorted(wanted), "run make docs: it writes docs/api/ from the public modules"
    for name, text in wanted.items():
        assert committed[name] == text, f"docs/api/{name} differs from what make docs writes: run make docs"


@pytest.mark.parametrize(
    "section", ["Operator", "Sensor", "Triggers"], ids=["operators", "sensors", "triggers"]
)
def test_each_kind_of_airflow_class_has_at_least_one_page(section: str) -> None:
    module = api_pages()
    (found,) = [s for s in module.SECTIONS if s.title == section]
    assert module.public_names(found), f"no public class found for {section}"
