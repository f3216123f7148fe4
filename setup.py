"""Packages are discovered, never listed: every folder of Python files under avatargen/ (a folder without an
``__init__.py`` too), and conf/ as avatargen.conf (its folder is mapped in pyproject.toml's package-dir). Everything
else about the project is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["avatargen", "avatargen.*"], exclude=["*.__pycache__"]), "avatargen.conf"])
