"""`python -m server.cli …` is `mismatch …`."""

from server.cli import main

main()
