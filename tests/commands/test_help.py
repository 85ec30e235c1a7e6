"""Help read through a pipe: a fixed width where every option name is whole, COLUMNS honoured, and every
command's summary one whole sentence (real runs of ``python -m dcpctl ... --help`` with stdout a pipe)."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from dcpctl.cli import HELP_WIDTH, app

ROOT = Path(__file__).resolve().parents[2]
# the longest summary that fits one row of the commands panel at HELP_WIDTH (its border, names and padding)
MAX_SUMMARY = 100


def _commands() -> list[tuple[list[str], object]]:
    root = typer.main.get_command(app)
    out: list[tuple[list[str], object]] = [([], root)]
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        out.append(([name], command))
        for sub, subcommand in getattr(command, "commands", {}).items():
            out.append(([name, sub], subcommand))
    return out


def piped_help(words: list[str], **extra: str) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    env.update(PYTHONPATH=str(ROOT), **extra)
    done = subprocess.run([sys.executable, "-m", "dcpctl", *words, "--help"], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("words", "command"), _commands(), ids=lambda c: " ".join(c) if isinstance(c, list) else "")
def test_piped_help_has_every_option_name_whole(words: list[str], command: object) -> None:
    """Piped, help was 80 columns wide with a 15-column description and option names cut with '…'."""
    text = piped_help(words)
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) == HELP_WIDTH
    for param in command.params:  # type: ignore[attr-defined]
        for option in [o for o in (*param.opts, *param.secondary_opts) if o.startswith("-")]:
            assert option in text, f"{option} of dcpctl {' '.join(words)} is not whole in its piped help"


def test_columns_is_honoured_when_piped() -> None:
    text = piped_help(["decode"], COLUMNS="100")
    assert max(len(line) for line in text.splitlines()) == 100


@pytest.mark.parametrize(("words", "command"), _commands()[1:],
                         ids=lambda c: " ".join(c) if isinstance(c, list) else "")
def test_every_summary_is_one_sentence_on_one_line(words: list[str], command: object) -> None:
    """serve's and analyze's summaries ran over two docstring lines, and the commands panel broke them where
    the docstring did."""
    summary = inspect.cleandoc(command.help or "").split("\n\n")[0]  # type: ignore[attr-defined]
    assert "\n" not in summary, summary
    assert summary.endswith("."), summary
    assert ". " not in summary, summary
    assert len(summary) <= MAX_SUMMARY, summary


def test_the_commands_panel_gives_each_command_one_row() -> None:
    text = piped_help([])
    panel = [line for line in text[text.index("Commands"):].splitlines() if line.startswith("│")]
    names = [line.split()[1] for line in panel if line.startswith("│ ") and line[2] != " "]
    assert names == list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert len(panel) == len(names), "\n".join(panel)  # no summary wraps onto a second row


@pytest.mark.parametrize(("words", "command"), _commands(), ids=lambda c: " ".join(c) if isinstance(c, list) else "")
def test_help_names_what_each_option_takes(words: list[str], command: object) -> None:
    """Help showed type names (``<bool>`` on flags, ``<str>``, ``<path>``, ``<list[str]>`` beside an argument
    already named FILE); now a flag shows nothing and a value is named as git and kcat name theirs."""
    text = piped_help(words)
    shown_types = re.findall(r"<(?:bool|str|path|int|float|list\[[^\]]*\]|[a-z ]*range)>", text)
    assert not shown_types, f"dcpctl {' '.join(words)} --help shows {shown_types}"
    for param in command.params:  # type: ignore[attr-defined]
        if param.param_type_name == "option" and not param.is_flag:
            choices = getattr(getattr(param, "type_descriptor", None), "is_choice", False)  # shown as a|b|c
            assert param.metavar or choices, f"{param.opts} of dcpctl {' '.join(words)} names no value"
            name = re.escape(param.opts[0])
            row = next(line for line in text.splitlines() if re.match(rf"│\s{{1,40}}(\*\s+)?{name}\s", line))
            assert (param.metavar or "|") in row, row


@pytest.mark.parametrize("words", [["-h", "decode"], ["--version", "decode"], ["decod"]])
def test_the_root_knows_every_command_whatever_comes_after(words: list[str]) -> None:
    """A command's start imports its own module only; the root's help, --version and a misspelt name still
    see every command."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", *words], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    if words[0] == "-h":
        listed = re.findall(r"^│ (\w+) ", done.stdout, re.MULTILINE)
        assert listed == list(typer.main.get_command(app).commands), done.stdout  # type: ignore[attr-defined]
    elif words[0] == "--version":
        assert done.stdout.startswith("dcpctl "), done.stdout
    else:
        assert "did you mean 'decode'" in done.stderr.lower(), done.stderr

