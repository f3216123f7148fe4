"""``python -m avatargen.torchrun [torchrun's options] COMMAND [ARGS]``: torchrun that ends as avatargen does.

torchrun reports a rank that exits non-zero with its own ``ChildFailedError`` traceback (about 25 lines) and exits 1,
after the rank's one line: a refusal (exit 2), a stop (130, 143) and a failure (1) end alike. This runs torchrun's
own launcher (``torch.distributed.run``, every option as torchrun takes it) on ``-m avatargen COMMAND ARGS`` and, when
a rank fails, exits with the exit code of the first rank that failed, leaving the ranks' lines as the only words:
torchrun's report and its log lines are left out. torchrun then stops the other ranks with SIGTERM, so a rank still
starting may add its own "interrupted by SIGTERM" line. A signal to this process reaches the ranks as it does
through torchrun (docs/distributed.md).
"""

from __future__ import annotations

import logging
import sys

from avatargen.errors import EXIT_FAILURE


def split_arguments(argv: list[str], commands: set[str]) -> tuple[list[str], list[str]]:
    """(torchrun's options, avatargen's command and arguments): the command is the first of ``commands`` in ``argv``
    that is not an option's value."""
    for index, word in enumerate(argv):
        if word in commands and (index == 0 or not _takes_value(argv[index - 1])):
            return argv[:index], argv[index:]
    return argv, []


def _takes_value(option: str) -> bool:
    """Whether torchrun's ``option`` (``--nproc-per-node``) takes the next word as its value (not a ``--flag`` alone,
    not ``--option=value``)."""
    return option.startswith("-") and "=" not in option and option not in _FLAGS


# torchrun's options that take no value (torch.distributed.run's parser: store_true / store_const)
_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}


def exit_code(failure: object) -> int:
    """The exit code a failed launch ends with: the first rank that failed (torchrun then stops the others), a signal's
    as a shell gives it (128 + N)."""
    code = failure.exitcode
    return code if code > 0 else (128 - code if code < 0 else EXIT_FAILURE)


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    import typer

    from avatargen.cli import app

    commands = set(typer.main.get_command(app).commands)  # as Click names them: render, batch, weights, ...
    options, command = split_arguments(sys.argv[1:] if argv is None else argv, commands)
    if not command and options in (["-h"], ["--help"]):
        print("usage: python -m avatargen.torchrun [torchrun's options] COMMAND [ARGS]\n\nRuns torchrun (every option "
              "as `torchrun --help` gives it) on `avatargen COMMAND ARGS` and ends with the exit code and line of the "
              f"first rank that failed.\nCommands: {', '.join(sorted(commands))} (docs/distributed.md)")  # fmt: skip
        return 0
    if not command:
        print(f"error: give avatargen's command after torchrun's options ({', '.join(sorted(commands))}); see "
              "docs/distributed.md", file=sys.stderr)  # fmt: skip
        return 2
    logging.disable(logging.ERROR)  # torchrun's banner, its rendezvous notes, "failed (exitcode: 2)": the ranks speak
    try:
        run(parse_args([*options, "-m", "avatargen", *command]))
    except ChildFailedError as error:
        return exit_code(error.get_first_failure()[1])
    except SignalException as error:  # SIGINT/SIGTERM to the launcher, passed on: the ranks said what they kept
        return 128 + int(error.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
