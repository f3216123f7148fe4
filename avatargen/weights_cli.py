"""``avatargen weights``: commands about model weights on disk (registered as a sub-app of the CLI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from avatargen.errors import EXIT_BAD_INPUT, ConfigError

weights_app = typer.Typer(name="weights", help="Check downloaded model weights before rendering.", no_args_is_help=True)


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


@weights_app.command("check")
def check(
    folder: Path = typer.Argument(..., help="The weights folder (InfiniteTalk's README layout: docs/models.md)."),
    overrides: Optional[List[str]] = typer.Argument(None, help="Config overrides, e.g. model=infinitetalk model.wan.lora=[...]"),
    as_json: bool = typer.Option(False, "--json", help="Print the whole report as JSON."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Every missing file, missing / unexpected / mis-shaped tensor, the stored dtypes, and the parameter count and
    bytes of each module, from the file headers alone (no tensor data is read). Exit 2 on any problem, one line each."""
    from avatargen.cli import _run

    result: dict = {}

    def action() -> None:
        from avatargen.config.loader import load_config, to_config
        from avatargen.pipeline.wan_check import check_wan_weights

        config = to_config(load_config([*(overrides or []), f"model.checkpoint={folder}", "model.weights=checkpoint"]))
        if config.model.wan is None:
            raise ConfigError(f"weights check reads Wan-family folders; choose model=infinitetalk or model=multitalk (got model={config.model.name})")
        if not folder.is_dir():
            raise ConfigError(f"'{folder}' is not a folder; give the weights/ folder (docs/models.md)")
        report = check_wan_weights(config, folder)
        result["ok"] = report.ok
        if as_json:
            print(json.dumps(report.to_json(), indent=2))
        else:
            for module in report.modules:
                dtypes = ", ".join(f"{dtype} x {count}" for dtype, count in sorted(module.dtypes.items())) or "no tensors"
                print(f"{module.module}: {module.parameters:,} parameters, {_gib(module.stored_bytes)} stored ({dtypes})")
        for line in report.problems():
            print(f"problem: {line}", file=sys.stderr)
        if not report.ok:
            print(f"error: {len(report.problems())} problem(s) in '{folder}' for model={config.model.name}", file=sys.stderr)

    _run(action, debug)
    if not result.get("ok", False):
        raise typer.Exit(EXIT_BAD_INPUT)
