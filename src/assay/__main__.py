"""``python -m assay``: the ``assay`` command."""

from assay.cli.app import main

main()
