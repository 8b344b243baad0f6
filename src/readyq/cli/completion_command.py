"""`readyq completion`: the shell completion script."""

from __future__ import annotations

import argparse
import sys

from readyq.cli.options import Subparsers

SHELLS = ("bash", "zsh", "fish")


def add_completion_parser(subparsers: Subparsers) -> None:
    """Add `readyq completion` to the subparsers."""
    p = subparsers.add_parser(
        "completion",
        help="print the shell completion script for bash, zsh or fish",
        description="Print the script that lets the shell complete readyq's commands and "
        "options. Load it in the shell's startup file: bash: eval \"$(readyq completion "
        "bash)\" in ~/.bashrc; zsh: eval \"$(readyq completion zsh)\" in ~/.zshrc, after "
        "compinit; fish: readyq completion fish > ~/.config/fish/completions/readyq.fish.",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(run=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["readyq"], shell=args.shell))
    return 0
