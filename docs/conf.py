"""Sphinx configuration of the documentation site (``make docs``; warnings are errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
# Autodoc imports Airflow: give it a home of its own under the build folder, never the user's.
os.environ["AIRFLOW_HOME"] = str(HERE / "_build" / "airflow-home")

import airflow_k8s_retry  # noqa: E402

project = "airflow-k8s-retry"
author = "airflow-k8s-retry contributors"
release = version = airflow_k8s_retry.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinxarg.ext",
    "api_pages",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]

# Command-line flags keep their two hyphens (no en dash for "--").
smartquotes = False
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"exclude-members": "__init__, __new__"}

html_theme = "furo"
html_title = f"airflow-k8s-retry {release}"
