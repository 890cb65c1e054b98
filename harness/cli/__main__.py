"""`python -m harness.cli`: the opcase command."""
from harness.cli import main

main()
