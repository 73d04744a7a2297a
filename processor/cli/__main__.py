"""`python -m processor.cli` runs the `dispersion` command."""

from processor.cli import main

raise SystemExit(main())
