"""``python -m avatargen`` (and ``torchrun -m avatargen``) runs the CLI."""

from avatargen.interrupts import record_signals

record_signals()  # before the CLI's imports: a signal at start-up is one line too (avatargen/interrupts.py)

from avatargen.cli import main  # noqa: E402

main()
