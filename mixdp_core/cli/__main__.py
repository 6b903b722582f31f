"""``python -m mixdp_core.cli`` runs the ``mixdp`` command line."""

from . import main

raise SystemExit(main())
