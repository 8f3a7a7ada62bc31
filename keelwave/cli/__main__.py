"""`python -m keelwave.cli` is the `keelwave` command."""

from keelwave.cli import main

main()
