"""What a new user asks the CLI first: its version, its help, and shell completion.

The help checks read the parser itself (every command, argument and default); completion
runs the CLI as the shells' scripts do, through argcomplete's environment variables.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import readyq
from readyq.cli import build_parser, main

SHELLS = ("bash", "zsh", "fish")

# Options whose help argparse writes itself, and the worker's --db/--prefix, hidden on
# purpose (the app's queue has its own).
BUILTIN = {"help", "version"}


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    root = build_parser()
    yield "readyq", root
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"readyq {name}", sub


def arguments() -> Iterator[tuple[str, argparse.Action]]:
    for name, parser in parsers():
        for action in parser._actions:
            if action.dest in BUILTIN or action.help == argparse.SUPPRESS:
                continue
            yield name, action


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"readyq {readyq.__version__}\n"


def test_bare_readyq_prints_the_whole_help_as_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    full = build_parser().format_help()
    for argv in ([], ["-v"], ["--db", "sqlite:///x.db"]):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == full, argv
    assert "commands:" in full and "completion" in full and "--version" in full


def test_every_command_and_argument_has_a_help_text() -> None:
    root = build_parser()
    [commands] = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {a.dest: a.help for a in commands._choices_actions}
    assert set(listed) == set(commands.choices)
    for name, parser in parsers():
        if name != "readyq":
            assert listed[name.split()[1]], name  # the line in `readyq --help`
            assert parser.description, name  # the text of `readyq NAME --help`
    missing = [(name, a.dest) for name, a in arguments() if not (a.help or "").strip()]
    assert missing == []


def test_every_default_is_stated_in_its_help() -> None:
    unstated = [
        (name, action.dest)
        for name, action in arguments()
        if action.option_strings
        and not action.required
        and action.default not in (None, False, [], argparse.SUPPRESS)
        and "default" not in (action.help or "")
    ]
    assert unstated == []
    [interval] = [a for name, a in arguments() if name == "readyq top" and a.dest == "interval"]
    assert "(default 1)" in interval.help  # type: ignore[operator]


def test_help_shows_no_markup_and_no_file_of_the_source_tree() -> None:
    root_help = build_parser().format_help()
    assert root_help.split("\n\n")[1].startswith("Operate readyq")
    for name, parser in parsers():
        text = parser.format_help()
        assert "``" not in text and not re.search(r":\w+:`", text), name
        # An installed wheel has no docs/ or README: help text cannot send users there.
        assert not re.search(r"docs/|\.md\b|README", text), name


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_prints_the_script_of_each_shell(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    if shell == "fish":
        assert "complete --command readyq" in script and "_ARGCOMPLETE_SHELL fish" in script
    else:
        # argcomplete writes one script for both: it registers itself with `complete` in
        # bash and with `compdef` in zsh.
        assert script.startswith("#compdef readyq\n")
        assert "complete -o nospace -o default -o bashdefault -F _python_argcomplete readyq" in (
            script
        )
        assert "compdef _python_argcomplete readyq" in script


def test_completion_refuses_an_unknown_shell(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["completion", "tcsh"])
    assert exit_.value.code == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def complete(line: str, shell: str, tmp_path: Path) -> list[str]:
    """The candidates readyq gives for the cursor at the end of ``line``, asked with the
    environment each shell's script sets (argcomplete's protocol)."""
    answer = tmp_path / f"answer-{shell}"
    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_SHELL=shell,
               _ARGCOMPLETE_SUPPRESS_SPACE="1", COMP_LINE=line, COMP_POINT=str(len(line)),
               _ARGCOMPLETE_STDOUT_FILENAME=str(answer))
    separator = "\013"
    if shell == "bash":
        env["COMP_TYPE"] = "9"  # a plain Tab
    if shell == "fish":
        separator = "\n"
        env.update(_ARGCOMPLETE_IFS="\n", _ARGCOMPLETE_DFS="\t")
    out = subprocess.run([sys.executable, "-m", "readyq.cli"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # the answer goes to the completion channel only
    return answer.read_text().split(separator)


def test_completion_answers_each_shell_through_argcomplete(tmp_path: Path) -> None:
    show_help = "one job: fields, attempts, error, dependencies, dependents"
    assert complete("readyq sh", "bash", tmp_path) == ["show"]
    # zsh and fish show each candidate's help beside it.
    assert complete("readyq sh", "zsh", tmp_path) == [f"show:{show_help}"]
    assert complete("readyq sh", "fish", tmp_path) == [f"show\t{show_help}"]
    assert complete("readyq --db sqlite:///x.db st", "bash", tmp_path) == ["status"]
    assert complete("readyq dag 3 --format m", "bash", tmp_path) == ["mermaid"]
    assert set(complete("readyq completion ", "bash", tmp_path)) >= set(SHELLS)
    assert "--extra-attempts" in complete("readyq retry 1 --e", "bash", tmp_path)


def test_bash_completes_a_partial_command_with_the_printed_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bash = shutil.which("bash")
    assert bash is not None, "bash is needed to run the bash completion script"
    assert main(["completion", "bash"]) == 0
    (tmp_path / "readyq.bash").write_text(capsys.readouterr().out)
    # The script runs `readyq` from PATH: this one is the readyq under test.
    launcher = tmp_path / "bin" / "readyq"
    launcher.parent.mkdir()
    launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m readyq.cli \"$@\"\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    session = (
        f"source {shlex.quote(str(tmp_path / 'readyq.bash'))}\n"
        "complete -p readyq\n"
        'COMP_LINE="readyq sh"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(readyq sh); '
        "COMP_CWORD=1; COMP_TYPE=9\n"
        "_python_argcomplete readyq sh readyq\n"
        'printf "<%s>\\n" "${COMPREPLY[@]}"\n'
    )
    env = dict(os.environ, PATH=f"{launcher.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([bash, "--norc", "--noprofile", "-c", session], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    registered, *replies = out.stdout.splitlines()
    assert registered.endswith("-F _python_argcomplete readyq")
    # Outside an interactive completion bash cannot suppress the space, so argcomplete adds it.
    assert replies == ["<show >"]
