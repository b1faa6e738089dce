"""Run the CLI with `python -m pcf`."""

from pcf.cli import main

main()
