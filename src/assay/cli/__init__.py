"""The ``assay`` command line (Typer + Rich). May import every other package."""
