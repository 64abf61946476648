"""`python -m maskc ...` is the `maskc` command."""

from maskc.cli import main

main()
