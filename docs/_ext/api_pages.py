"""The reference pages: one page per public class (and one for the simulator's pytest plugin),
written from the public modules' exports before Sphinx reads the sources.

Which names get a page is decided here and nowhere else: a section names the module DAG authors
import from and either the base class whose exported subclasses get a page (so a trigger class
added to ``airflow_k8s_retry.triggers`` gets its page without an edit here) or the names
themselves. The pages are committed (the README links to them); a page whose text differs from what
this module writes is rewritten, and a test fails when the committed pages are not these.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
API = DOCS / "api"


@dataclass(frozen=True)
class Section:
    """A group of reference pages: ``title``, the ``module`` its names are imported from, and which
    of the module's ``__all__`` get a page: subclasses of ``base`` (a dotted name), or ``names``."""

    title: str
    module: str
    base: str = ""
    names: tuple[str, ...] = ()
    #: Document the class's own members too; an Airflow operator's, sensor's or trigger's are
    #: Airflow's protocol (execute, serialize, run), not for DAG authors: their page is the class's.
    members: bool = True


SECTIONS = (
    Section("Operator", "airflow_k8s_retry.operators", base="airflow.sdk.BaseOperator", members=False),
    Section("TaskFlow decorator", "airflow_k8s_retry.decorators", names=("retrying_kubernetes_task",)),
    Section("Sensor", "airflow_k8s_retry.sensors", base="airflow.sdk.BaseSensorOperator", members=False),
    Section(
        "Triggers", "airflow_k8s_retry.triggers", base="airflow.triggers.base.BaseTrigger", members=False
    ),
    Section(
        "Classification",
        "airflow_k8s_retry.classification",
        names=("FailurePolicy", "classify", "hint_for", "Verdict"),
    ),
    Section("Retry policy", "airflow_k8s_retry.retry_policy", names=("PodFailureRetryPolicy", "Delay")),
    Section("Memory growth", "airflow_k8s_retry.memory_growth", names=("MemoryGrowth",)),
    Section("Exceptions", "airflow_k8s_retry.exceptions"),
    Section("Simulator", "airflow_k8s_retry_testing", names=("FakeCluster",)),
    Section("Simulator's pytest plugin", "airflow_k8s_retry_testing.pytest_plugin"),
)


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def public_names(section: Section) -> list[str]:
    """The dotted names of ``section`` that get a page, in ``__all__``'s order; the module itself
    when the section names neither a base class nor names."""
    if not section.base and not section.names:
        return [section.module]
    module = importlib.import_module(section.module)
    if section.names:
        exported = [name for name in section.names if hasattr(module, name)]
    else:
        base = _resolve(section.base)
        exported = [
            name
            for name in module.__all__
            if isinstance(getattr(module, name), type) and issubclass(getattr(module, name), base)
        ]
    return [f"{section.module}.{name}" for name in exported]


def page(dotted: str, members: bool = True) -> str:
    """The page of one public name: its title and the autodoc directive that fills it."""
    module, _, name = dotted.rpartition(".")
    target = getattr(importlib.import_module(module), name, None) or importlib.import_module(dotted)
    options = ("   :members:\n" if members else "") + "   :show-inheritance:\n"
    if isinstance(target, types.ModuleType):
        title, directive = dotted, f".. automodule:: {dotted}\n{options}"
    elif isinstance(target, type):
        title, directive = name, f".. autoclass:: {dotted}\n{options}"
    else:
        title, directive = f"{name}()", f".. autofunction:: {dotted}\n"
    return (
        f"# {title}\n\n"
        f"<!-- Written by docs/_ext/api_pages.py (make docs); the text comes from the docstrings. -->\n\n"
        f"```{{eval-rst}}\n{directive}```\n"
    )


def pages() -> dict[str, str]:
    """Every reference page: file name (``<dotted name>.md``) -> text, and the index last."""
    texts: dict[str, str] = {}
    index = ["# API reference", "", "Generated from the docstrings of the public names.", ""]
    for section in SECTIONS:
        names = public_names(section)
        index += [f"## {section.title}", "", "```{toctree}", ":maxdepth: 1", ""]
        for dotted in names:
            texts[f"{dotted}.md"] = page(dotted, section.members)
            index.append(dotted)
        index += ["```", ""]
    texts["index.md"] = "\n".join(index)
    return texts


def write(folder: Path = API) -> list[str]:
    """Write the pages into ``folder``, only those that changed, and remove stale ones; returns the
    names of the files written or removed."""
    wanted = pages()
    changed = []
    folder.mkdir(exist_ok=True)
    for stale in sorted(set(p.name for p in folder.glob("*.md")) - set(wanted)):
        (folder / stale).unlink()
        changed.append(stale)
    for name, text in wanted.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    return changed


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", lambda app: write())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
