"""Option groups: a dataclass of typer options taken as one parameter, seen by typer as the command's own
options in the group's place (real typer apps, parsed by click)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from dcpctl.commands._options import option_groups


@dataclass(frozen=True)
class Pair:
    left: Annotated[int, typer.Option("--left", min=0)] = 1
    right: Annotated[str, typer.Option("--right")] = "r"


seen: list[tuple[str, Pair, bool]] = []


@option_groups
def command(name: Annotated[str, typer.Argument()],
            pair: Pair = Pair(),
            loud: Annotated[bool, typer.Option("--loud")] = False) -> None:
    seen.append((name, pair, loud))


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands, so the first is invoked by name
    return app


@pytest.mark.parametrize(("args", "expected"), [
    (["x"], ("x", Pair(), False)),
    (["x", "--right", "q", "--loud"], ("x", Pair(1, "q"), True)),
    (["--left", "7", "y", "--right", "s"], ("y", Pair(7, "s"), False)),
])
def test_the_command_gets_its_group_built_from_the_options(args: list[str], expected: tuple[str, Pair, bool]) -> None:
    seen.clear()
    result = CliRunner().invoke(_app(), ["command", *args])
    assert result.exit_code == 0, result.output
    assert seen == [expected]


def test_a_group_s_options_keep_their_checks_and_place_in_help() -> None:
    result = CliRunner().invoke(_app(), ["command", "x", "--left", "-1"])
    assert result.exit_code == 2
    assert seen[-1:] != [("x", Pair(-1), False)]
    help_text = CliRunner().invoke(_app(), ["command", "--help"], env={"COLUMNS": "200"}).output
    assert help_text.index("--left") < help_text.index("--right") < help_text.index("--loud")


def test_a_group_option_with_a_parameter_s_name_is_refused() -> None:
    def clash(left: Annotated[int, typer.Option("--other")] = 0,
              pair: Pair = Pair()) -> None:
        pass

    with pytest.raises(TypeError, match="left"):
        option_groups(clash)
