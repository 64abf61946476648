"""`python -m maskc ...` is the `maskc` command."""

from .cli import main

main()
