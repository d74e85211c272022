"""Sphinx configuration of the nbburst documentation: MyST pages, the example notebooks rendered with the
outputs stored in them (never executed here: they start machines), and reference pages made from the code."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

from nbburst import __version__  # noqa: E402

project = "nbburst"
author = "The nbburst developers"
copyright = "The nbburst developers"
release = version = __version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "nbburst_docs"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4  # the pages link to each other's sections by their GitHub-style anchors
nb_execution_mode = "off"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "pydata_sphinx_theme"
html_title = "nbburst"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
