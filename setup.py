"""Packages are discovered, never listed: every package under avatargen/, and conf/ as avatargen.conf (its folder is
mapped in pyproject.toml's package-dir). Everything else about the project is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["avatargen", "avatargen.*"]), "avatargen.conf"])
