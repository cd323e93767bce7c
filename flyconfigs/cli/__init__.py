"""The ``flyconfigs`` command: a thin layer over the library, one module per command
group (each adds its own parser).

Exit status, one rule for every command:

- 0: success (``doctor`` included when it found only warnings);
- 1: a problem was found in what was read or done: an invalid artifact or manifest, a
  failed build or upload, an unreachable index, an error ``doctor`` found;
- 2: a usage error, that is bad input on the command line: an unknown command or
  option, a file or folder named that does not exist, a malformed ``--version``, key,
  key grid or key file, device or kernel name;
- 130: interrupted.

Errors are one line on stderr; ``--traceback`` (anywhere on the line) adds the whole
trace and keeps the status.  ``--json`` prints one versioned JSON object on stdout
instead of text; ``flyconfigs --version`` prints the version.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from flyconfigs._version import __version__
from flyconfigs.cli import compare, exports, files, flydsl, imports, installed, predict, publish, t4, tune
from flyconfigs.cli._common import Usage
from flyconfigs.errors import FlyconfigsError

__all__ = ["main"]

_GROUPS = (files, installed, imports, exports, compare, t4, flydsl, publish, tune, predict)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flyconfigs", description="Tuned GPU-kernel configurations.")
    parser.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    parser.add_argument("--version", action="version", version=f"flyconfigs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    return parser


def _usage_errors() -> tuple[type[BaseException], ...]:
    from flyconfigs.errors import InvalidDeviceError, InvalidKeyError, UnknownKernelError

    return (Usage, InvalidKeyError, UnknownKernelError, InvalidDeviceError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 1 a problem found, 2 a
    usage error, 130 interrupted: the rule of this module's docstring).  With
    ``--traceback`` an error that is not a usage error propagates with its trace."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    words = list(sys.argv[1:] if argv is None else argv)
    traceback_wanted = "--traceback" in words
    words = [w for w in words if w != "--traceback"]
    parser = _parser()
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.traceback = traceback_wanted
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        if traceback_wanted:
            raise
        print("flyconfigs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (FlyconfigsError, OSError, Usage) as exc:
        usage = isinstance(exc, _usage_errors())
        if traceback_wanted and not usage:
            raise
        if traceback_wanted:
            # The trace is asked for, but a usage error stays exit 2 (an uncaught one would be 1).
            traceback.print_exc(file=sys.stderr)
        print(f"flyconfigs: error: {_one_line(exc)}", file=sys.stderr)
        hint = getattr(exc, "hint", None)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 2 if usage else 1


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {os.fsdecode(exc.filename)}"
    else:
        text = str(exc) or type(exc).__name__
    lines = text.splitlines()
    return lines[0] + (f" (+{len(lines) - 1} more lines; --traceback for all)" if len(lines) > 1 else "")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
