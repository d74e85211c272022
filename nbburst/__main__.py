"""``python -m nbburst``: the command line (same as the ``nbburst`` command)."""

from .ui.cli import main

raise SystemExit(main())
