"""Every ``paperarena`` option has help showing its default; every command has an example."""

from __future__ import annotations

import argparse
import shlex

import pytest

from daemon.app.cli_parser import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(subs) == 1
    return dict(subs[0].choices)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _shown(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text of ``action`` as ``--help`` prints it (defaults expanded)."""
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


COMMANDS = sorted(_subcommands())


def test_every_command_is_walked() -> None:
    assert {"run", "replay", "report", "check-config", "probe", "export", "backup"} <= set(COMMANDS)


@pytest.mark.parametrize("name", ["paperarena", *COMMANDS])
def test_every_option_has_help_showing_its_default(name: str) -> None:
    parser = build_parser() if name == "paperarena" else _subcommands()[name]
    for action in _options(parser):
        shown = _shown(parser, action)
        assert shown.strip(), f"{name} {action.option_strings[0]}: no help text"
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS:
            continue
        renderings = {str(default)}
        if isinstance(default, float):
            renderings.add(f"{default:g}")
        assert "default" in shown and any(r in shown for r in renderings), (
            f"{name} {action.option_strings[0]}: help {shown!r} does not show default {default!r}")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_positional_has_help(name: str) -> None:
    parser = _subcommands()[name]
    for action in parser._actions:
        if not action.option_strings:
            assert (action.help or "").strip(), f"{name} {action.dest}: no help text"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_help_has_an_example(name: str) -> None:
    text = _subcommands()[name].format_help()
    assert "example:" in text
    example = text.split("example:", 1)[1]
    assert f"paperarena {name} " in example or example.strip() == f"paperarena {name}"


def test_example_keeps_its_line_breaks() -> None:
    text = build_parser().format_help()
    assert "\n  paperarena replay " in text and "\n  paperarena report " in text


@pytest.mark.parametrize("name", COMMANDS)
def test_every_example_parses(name: str) -> None:
    example = _subcommands()[name].epilog or ""
    line = example.split("example:", 1)[1].strip().splitlines()[0]
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.cmd == name
