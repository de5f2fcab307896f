"""The ``hami`` command line."""

from __future__ import annotations

import typer

from hami import __version__

app = typer.Typer(no_args_is_help=True, add_completion=False, help="hami: GPU-sharing scheduler for Kubernetes.")


@app.command()
def version() -> None:
    """Print hami's version."""
    typer.echo(__version__)


def main() -> None:
    app()
