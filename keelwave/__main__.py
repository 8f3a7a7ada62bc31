"""`python -m keelwave` is the `keelwave` command."""

from keelwave.cli import main

main()
