"""Run the CLI with `python -m pcf`."""

from pcf.cli import app

app()
