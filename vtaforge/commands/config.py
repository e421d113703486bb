"""``vtaforge config show [PRESET|FILE]``: print a config and everything derived from it."""

from __future__ import annotations

import click


@click.group("config")
def config_group() -> None:
    """Inspect VTA configurations."""


@config_group.command("show")
@click.argument("spec", required=False, default="pynq")
@click.option("--json", "as_json", is_flag=True, help="print the upstream-style JSON instead")
def show(spec: str, as_json: bool) -> None:
    """Print SPEC (a preset name or a vta_config.json file; default pynq) as a table."""
    from ._inputs import read_config

    cfg = read_config(spec)
    if as_json:
        click.echo(cfg.to_json(), nl=False)
        return
    rows = [("key", "value")]
    rows += [(k, str(v)) for k, v in cfg.hardware_dict().items()]
    rows += [("TARGET", cfg.TARGET), ("HW_VER", cfg.HW_VER)]
    rows += [(k, str(v)) for k, v in cfg.derived().items()]
    w = max(len(r[0]) for r in rows)
    click.echo(f"config {spec}")
    for k, v in rows:
        click.echo(f"  {k:<{w}}  {v}")


@config_group.command("presets")
def presets() -> None:
    """List the preset names."""
    from ..hw.config import PRESETS

    for p in PRESETS:
        click.echo(p)


COMMANDS = [config_group]
