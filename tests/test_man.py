"""Every command has a man page that names each of its options; dcpctl(1) lists every exit code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from dcpctl.cli import app
from dcpctl.exitcode import ExitCode

MAN = Path(__file__).resolve().parents[1] / "man"


def _commands() -> list[tuple[str, object]]:
    root = typer.main.get_command(app)
    out = []
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None)
        if subcommands:
            out += [(f"{name} {sub}", cmd) for sub, cmd in subcommands.items()]
        else:
            out.append((name, command))
    return out


def _page(name: str) -> str:
    return (MAN / f"dcpctl-{name.split(maxsplit=1)[0]}.1").read_text().replace("\\-", "-")


@pytest.mark.parametrize(("name", "command"), _commands(), ids=[n for n, _ in _commands()])
def test_every_option_is_documented(name: str, command: object) -> None:
    page = _page(name)
    for param in command.params:  # type: ignore[attr-defined]
        for option in [*param.opts, *param.secondary_opts]:
            if option.startswith("--"):
                assert option in page, f"{option} of dcpctl {name} is not in its man page"


def test_every_exit_code_is_documented() -> None:
    page = (MAN / "dcpctl.1").read_text()
    documented = {int(m) for m in re.findall(r"^\.B (\d+)$", page, re.MULTILINE)}
    assert documented == {int(code) for code in ExitCode}


def test_every_command_is_listed_in_dcpctl_1() -> None:
    page = (MAN / "dcpctl.1").read_text().replace("\\-", "-")
    for name, _ in _commands():
        assert f"dcpctl-{name.split()[0]}" in page


def test_every_dataset_column_of_analyze_is_documented() -> None:
    from dcpctl.pipeline.schema import column_types  # noqa: PLC0415 - pure: no Spark needed

    page = _page("analyze")  # the README points to the man page for the dataset's columns
    for name, _ in column_types(records=True):
        assert re.search(rf"\b{name}\b", page), f"column {name} is not in dcpctl-analyze(1)"


@pytest.mark.parametrize(("name", "command"), _commands(), ids=[n for n, _ in _commands()])
def test_an_options_value_is_named_as_its_help_names_it(name: str, command: object) -> None:
    """``--key PATTERN`` in the page and ``--key GLOB`` in the help read as two options' worth of values."""
    page = _page(name)
    for param in command.params:  # type: ignore[attr-defined]
        if getattr(param, "is_flag", False) or not param.opts:
            continue
        if param.metavar is not None:
            value = param.metavar
        elif param.type_descriptor.is_choice:
            value = "|".join(getattr(choice, "value", str(choice)) for choice in param.type_descriptor.choices)
        else:
            continue
        for option in param.opts:
            described = re.findall(rf'(?:^\.BI? |, (?:" )?){re.escape(option)} " ([^"\n]+)"?', page, re.MULTILINE)
            synopsis = [re.sub(r"[\s\]]", "", found) for found in
                        re.findall(rf"^\.RB \[ {re.escape(option)}\n\.IR ([^\n]+)", page, re.MULTILINE)]
            for written in described + synopsis:
                same = set(written.strip().split("|")) == set(value.split("|"))  # choices in either order
                assert same, f"{option} of dcpctl {name}: the page has {written!r}, the help {value!r}"
