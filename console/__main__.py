"""`python -m console [--host HOST]`: the console on CONSOLE_PORT, as `webhooks console`
runs it. A missing variable exits 1, a bad value 2, with one line naming it."""

from __future__ import annotations

import sys

import click

from console.app import serve
from console.settings import ConsoleSettings
from shared.errors import ConfigError, MissingVariable
from shared.settings import Settings


@click.command()
@click.option("--host", default=None,
              help="Interface to listen on (default $CONSOLE_HOST, else 127.0.0.1; "
                   "$CONSOLE_PORT is the port).")
def main(host: str | None) -> None:
    """The operator console on $CONSOLE_PORT."""
    try:
        settings = Settings.from_env()
        console_settings = ConsoleSettings.from_env()
        serve(settings, console_settings, host=host or console_settings.host)
    except MissingVariable as error:
        click.echo(f"console: {error}", err=True)
        sys.exit(1)
    except ConfigError as error:
        click.echo(f"console: {error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
