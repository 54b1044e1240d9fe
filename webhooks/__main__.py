"""`python -m webhooks` is the `webhooks` command."""

from webhooks.cli import main

main()
