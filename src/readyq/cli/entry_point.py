"""The `readyq` command's entry point: parse, run the command, and map every expected
failure to one line on stderr and an exit status."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from readyq.cli.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, CLIError, db_message
from readyq.cli.output import say
from readyq.cli.parser import build_parser
from readyq.errors import ReadyqError


def _run(args: argparse.Namespace) -> int:
    """Run one command; map every expected failure to one line on stderr."""
    import sqlalchemy as sa

    from readyq import admin
    from readyq.errors import (
        ConfigurationError,
        InvalidArgument,
        InvalidFilter,
        InvalidJob,
        JobNotFound,
        SchemaNotFound,
    )

    try:
        return int(args.run(args))
    except CLIError as exc:
        message, code = str(exc), exc.code
    except SchemaNotFound as exc:
        message, code = (
            str(exc).replace(
                "call Queue.create_schema() first",
                "run `readyq migrate` (or call Queue.create_schema()) first",
            ),
            1,
        )
    except (ConfigurationError, InvalidJob, InvalidFilter, InvalidArgument) as exc:
        message, code = str(exc), 2
    except (JobNotFound, admin.AdminError) as exc:
        message, code = str(exc).strip("'\""), 1
    except ReadyqError as exc:
        message, code = str(exc), 1
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        message, code = f"invalid database URL: {exc}", 2
    except sa.exc.DBAPIError as exc:
        message, code = f"database error ({exc.__class__.__name__}): {db_message(exc)}", 1
    say(f"readyq: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``readyq`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    try:
        try:
            return _main(argv)
        finally:
            # Output still buffered is written here, so a closed pipe is met inside this
            # handler and not at interpreter exit (where it would print an ignored error).
            sys.stdout.flush()
    except BrokenPipeError:
        # stdout's: the database drivers report a broken socket as their own errors.
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null, as the Python docs advise for SIGPIPE: the interpreter
    flushes stdout again on exit, which would fail once more on the closed pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:
        # The shell's completion hook (see `readyq completion`): argcomplete writes the
        # candidates for COMP_LINE/COMP_POINT and ends the process. Imported only then, so
        # that other runs do not pay for it.
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if args.command is None:
        # No command is a usage error, as for argparse's and clap's missing arguments: the
        # help goes to stderr with status 2, so a script that lost its command word does
        # not carry on as if it had run. `readyq --help` prints it on stdout with status 0.
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _run(args)
    except ReadyqError as exc:
        say(f"readyq: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
