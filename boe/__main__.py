"""`python -m boe` is the `boe` command."""

from boe.cli import main

main()
