"""How a command fails: the one-line refusal and the exit statuses."""

from __future__ import annotations


class CLIError(Exception):
    """A user mistake or a refusal, reported as one line on stderr."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# What a shell reports for a process killed by SIGPIPE (128 + 13). Python ignores SIGPIPE,
# so a closed stdout is a BrokenPipeError instead of that death; exiting with the same
# status keeps `set -o pipefail` scripts seeing what they see from cat or grep. Exit 1
# (the Python docs' example) would read as "the operation could not be done" here.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


def db_message(exc: BaseException) -> str:
    """The first line of a database error (the driver's, not SQLAlchemy's wrapping)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [x.strip() for x in str(orig).strip().splitlines() if x.strip()]
    return lines[0] if lines else exc.__class__.__name__
