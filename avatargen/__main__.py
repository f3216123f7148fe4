"""``python -m avatargen`` (and ``torchrun -m avatargen``) runs the CLI."""

from avatargen.cli import main

main()
