"""The root command: registers subcommands and turns every failure into a one-line error and exit code."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, Final

import typer

from dcpctl import __version__
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.nearest import closest
from dcpctl.render.env import Environment, OutputError, checked_stdout, discard_stdout
from dcpctl.safetext import shown
from dcpctl.stopsignal import CLEAN_STOPS

# Help read through a pipe (| less, | grep) or in a file: rich would render it at 80 columns, which cut option
# names (serve's --max-unauthenticated-packet-size) and squeezed descriptions into 15 columns. 120 is the
# narrowest width at which every option name stays whole beside its description. COLUMNS, when set, wins.
HELP_WIDTH = 120

# Each command's module and function, in the order help lists them. A command's module is imported only when
# that command runs (or help lists them all), so a command's start does not pay for the others' imports:
# serve's producer, analyze's pipeline, capture's sniffer.
COMMANDS: Final = {
    "decode": ("dcpctl.commands.decode", "decode"),
    "capture": ("dcpctl.commands.capture", "capture"),
    "hexdump": ("dcpctl.commands.hexdump", "hexdump"),
    "encode": ("dcpctl.commands.encode", "encode_command"),
    "fields": ("dcpctl.commands.fields", "fields"),
    "stream": ("dcpctl.commands.stream", "stream"),
    "failover": ("dcpctl.commands.failover", "failover"),
    "serve": ("dcpctl.commands.serve", "serve"),
    "analyze": ("dcpctl.commands.analyze", "analyze"),
    "redact": ("dcpctl.commands.redact", "redact"),
    "rollback": ("dcpctl.commands.rollback", "rollback_app"),  # a group of its own
}


def make_app(names: Iterable[str] = COMMANDS) -> typer.Typer:
    """The root command with the subcommands ``names`` (every one by default)."""
    made = typer.Typer(
        name="dcpctl",
        help="See, capture and understand Couchbase's Database Change Protocol (DCP).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    made.callback()(root)
    for name in names:
        module, attribute = COMMANDS[name]
        function = getattr(importlib.import_module(module), attribute)
        if isinstance(function, typer.Typer):
            made.add_typer(function, name=name)
        else:
            made.command(name)(function)
    return made


def commands_for(args: Sequence[str]) -> Iterable[str]:
    """The subcommands a command line needs: the one it starts with, or all (root help or --version, even
    before a command's name, a name that is not a command, which click answers with the closest ones)."""
    return (args[0],) if args and args[0] in COMMANDS else COMMANDS


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dcpctl {__version__}")
        raise typer.Exit


def root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """See, capture and understand Couchbase's Database Change Protocol (DCP)."""


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> int:
    """Run dcpctl; returns the exit code (the console script exits with it)."""
    environment = env or Environment()
    with _help_rendered_at(help_width(environment)):
        return _main(list(argv) if argv is not None else sys.argv[1:], environment)


@contextlib.contextmanager
def _help_rendered_at(width: int | None) -> Iterator[None]:
    """Help rendered ``width`` columns wide while dcpctl runs. typer imports rich_utils (a sixth of a second)
    only to print help, and reads TERMINAL_WIDTH then; if it is in already, its MAX_WIDTH is set."""
    if width is None:
        yield
        return
    saved_env, saved_module = os.environ.get("TERMINAL_WIDTH"), sys.modules.get("typer.rich_utils")
    saved_width = getattr(saved_module, "MAX_WIDTH", None)
    os.environ["TERMINAL_WIDTH"] = str(width)
    if saved_module is not None:
        setattr(saved_module, "MAX_WIDTH", width)  # noqa: B010 - typed as absent by typer's stubs
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop("TERMINAL_WIDTH", None)
        else:
            os.environ["TERMINAL_WIDTH"] = saved_env
        loaded = sys.modules.get("typer.rich_utils")
        if loaded is not None:
            setattr(loaded, "MAX_WIDTH", saved_width)  # noqa: B010 - as above


def _name_the_values(command: Any) -> Any:
    """Help names what an option takes, as git's and kcat's do: a flag takes nothing, so it shows no type (typer
    would show ``<bool>``), and an argument's name already says what it is (``HOST[:PORT] <str>`` was
    doubled). Options that take a value declare their metavar (``FILE``, ``N``, ``NAME``) where they are
    declared; tests/commands/test_help.py holds every command to that."""
    for param in command.params:
        if param.param_type_name == "argument" or getattr(param, "is_flag", False):
            # an instance attribute, read by typer's help in place of its method
            setattr(param, "display_type_rich", _no_type)  # noqa: B010 - a method replaced on one object
    made = command.get_help_option  # -h/--help is made per context, outside params

    def help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            setattr(option, "display_type_rich", _no_type)  # noqa: B010 - as above
        return option

    setattr(command, "get_help_option", help_option)  # noqa: B010 - as above
    for sub in getattr(command, "commands", {}).values():
        _name_the_values(sub)
    return command


# arguments typed str that name files (``-`` is standard input), beside the options typed Path
_FILE_METAVARS: Final = frozenset({"FILE", "CAPTURE"})


def _refuse_empty_names(command: Any) -> Any:
    """An empty file name is a usage error (exit 2), said before the command runs: Python reads ``Path("")`` as
    ``.``, so ``-o "$OUT"`` with OUT unset would write into the working directory, and ``--password-file ""``
    would be reported as a directory."""
    for param in command.params:
        if not (param.type_descriptor.is_path or param.metavar in _FILE_METAVARS):
            continue
        made = param.process_value

        def checked(ctx: Any, value: Any, made: Any = made, param: Any = param) -> Any:
            given = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(name, str) and not name for name in given):
                raise typer.BadParameter("an empty name (a shell variable not set?)", ctx=ctx, param=param)
            return made(ctx, value)

        setattr(param, "process_value", checked)  # noqa: B010 - a method replaced on one object, as below
    for sub in getattr(command, "commands", {}).values():
        _refuse_empty_names(sub)
    return command


def _no_type(ctx: object) -> None:  # typer passes ctx by name
    return None


def _main(args: list[str], environment: Environment) -> int:
    try:
        made = typer.main.get_command(make_app(commands_for(args)))  # the command's imports
        command = _refuse_empty_names(_name_the_values(made))
        # make_context/invoke rather than main(): typer's main turns a closed pipe into exit 1
        with command.make_context("dcpctl", args, obj=environment) as ctx:
            result = command.invoke(ctx)
        environment.stdout.flush()  # what is still buffered fails here, where it can be said, not at exit
    except CommandError as exc:
        # the one place errors are written: wire, file and server text in them is escaped here (safetext)
        environment.stderr.write(f"dcpctl: error: {shown(str(exc))}\n")
        return int(exc.code)
    except OutputError as exc:
        discard_stdout()
        environment.stderr.write(f"dcpctl: error: cannot write standard output: {exc.strerror}\n")
        return int(ExitCode.INPUT)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        # a command whose own handlers make its stop signals a clean stop (stream, serve, capture) can still be
        # interrupted before it installs them, or after it gave them back: nothing begun, or all done, so exit 0
        environment.stderr.write("dcpctl: interrupted\n")
        return int(ExitCode.OK if args[:1] and args[0] in CLEAN_STOPS else ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (| head): stop quietly. Point stdout at devnull so the interpreter's final
        # flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    except typer.TyperException as exc:  # usage errors: bad option, missing argument, bad value
        environment.stderr.write(f"dcpctl: error: {shown(usage_message(exc))}\n")
        return int(ExitCode.USAGE)
    return int(result) if isinstance(result, int) else int(ExitCode.OK)


def help_width(environment: Environment) -> int | None:
    """The width to render help at, or None to leave it to rich: the terminal's, or COLUMNS or
    TERMINAL_WIDTH when set (rich and typer read those); else HELP_WIDTH."""
    if environment.width is not None:
        return environment.width
    if environment.stdout_isatty or os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH"):
        return None
    return HELP_WIDTH


def usage_message(exc: typer.TyperException) -> str:
    """click's usage error as the one line after ``dcpctl: error:``, naming the option and, for an unknown
    one, the closest names (click's own pick), instead of its four lines of usage, hint and message."""
    option = getattr(exc, "option_name", None)
    commands = getattr(getattr(getattr(exc, "ctx", None), "command", None), "commands", None)
    if not getattr(exc, "message", "") and commands:  # a group given no command: click printed its help, says ""
        return f"missing command: one of {', '.join(commands)}"
    if isinstance(option, str) and hasattr(exc, "possibilities"):  # NoSuchOption
        # click's own pick has no similarity floor (--bogus got --jobs): the command's options, by closeness
        command = getattr(getattr(exc, "ctx", None), "command", None)
        names = [name for param in getattr(command, "params", []) for name in (*param.opts, *param.secondary_opts)
                 if name.startswith("--")]
        # compared without the dashes every long option shares, which made --bogus look like --jobs
        close = closest(option.lstrip("-"), [name[2:] for name in names])
        hint = f" (did you mean {' or '.join('--' + name for name in close)}?)" if close else ""
        return f"no such option: {option}{hint}"
    param = getattr(exc, "param", None)
    text = getattr(exc, "message", "")
    if param is not None and text and not hasattr(exc, "param_type"):  # BadParameter, MissingParameter aside
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or getattr(param, "opts", [])
        name = max(opts, key=len) if getattr(param, "param_type_name", "") == "option" and opts \
            else getattr(param, "metavar", None) or str(getattr(param, "name", "")).upper()
        text = text.removeprefix("Value error, ")  # pydantic's wording for a validator's ValueError
        return f"{name}: {text[:1].lower()}{text[1:]}".removesuffix(".")
    format_message = getattr(exc, "format_message", None)
    line = format_message() if callable(format_message) else str(exc)
    return f"{line[:1].lower()}{line[1:]}".removesuffix(".")


def quiet_interrupts(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook``: a Ctrl-C that lands in a finalizer is not reported. The one seen: py4j's, as
    Spark's objects are freed while analyze ends; the command has done its work by then, or reports the
    interrupt itself. Anything else goes to Python's own hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)


def launch() -> int:
    """The command line of this process run: its exit code."""
    sys.unraisablehook = quiet_interrupts
    checked_stdout()
    return main()


def run() -> None:
    """The command line run and exited with (the console script is :func:`dcpctl.start.run`, which owns the
    stop signals while this module is imported)."""
    sys.exit(launch())


def __getattr__(name: str) -> Any:
    """``app``: the root command with every subcommand, made when first asked for (``dcpctl.cli.app``)."""
    if name == "app":
        made = globals()["app"] = make_app()
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
