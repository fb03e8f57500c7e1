"""``gps-dagster examples``: where the packaged seed example is (an installed wheel has no
repository ``examples/`` folder)."""

# Decisions embodied here (docs/decisions.md):
# * “The wheel ships the seed example; the default pool is the packaged copy”

from __future__ import annotations

import click

from gps_dagster.examples import packaged


@click.command("examples")
@click.option("--path", "name", metavar="FILE", help="Print only the path of this example.")
def examples_cmd(name: str | None) -> None:
    """List the example files shipped with the package (name and path)."""
    files = packaged()
    if name is None:
        for file, where in files.items():
            click.echo(f"{file}\t{where}")
        return
    if name not in files:
        raise click.UsageError(f"no packaged example {name!r}; there are: {', '.join(files)}")
    click.echo(str(files[name]))
