"""``avatargen batch status DIR``: every job of the batch in an out-dir (a folder or a bucket prefix) as done,
running (where), failed (why) or pending, read from what the out-dir holds; nothing is changed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

STATES = ("done", "running", "failed", "pending")
MANIFEST_NAME = "batch_jobs.json"  # every job's output (or a bad row's claim), written when a batch starts
MADE_BY = "avatargen batch"  # the mark of the side files a batch writes (a file at their names without it is a user's)


@dataclass
class JobState:
    """One job as the out-dir shows it now."""

    output: str
    state: str  # done | running | failed | pending
    host: str | None = None  # running: the worker
    pid: int | None = None
    error: str | None = None  # failed: why
    resumable: bool = False  # pending or running with resume state: the next claim continues it


def bad_row_label(row: int) -> str:
    return f"(job {row}: its row of the jobs file cannot run)"


def manifest_text(outputs: list[str]) -> str:
    return json.dumps({"made_by": MADE_BY, "outputs": outputs}, indent=1)


def print_status(states: list[JobState], out_dir: str, as_json: bool) -> None:
    counts = {state: sum(s.state == state for s in states) for state in STATES}
    if as_json:
        print(json.dumps({"out_dir": out_dir, **counts, "jobs": [asdict(s) for s in states]}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"avatargen batch status: {out_dir}")
    for name in ("output", "state", "where / why"):
        table.add_column(name, overflow="fold")
    colour = {"done": "green", "running": "yellow", "failed": "red", "pending": "cyan"}
    for s in states:
        where = f"{s.host} pid {s.pid}" if s.state == "running" else (s.error or "")
        if s.resumable:
            where = (where + "; " if where else "") + "resumes from its last checkpoint"
        table.add_row(s.output, f"[{colour[s.state]}]{s.state}[/]", where)
    console = Console(width=160)
    console.print(table)
    console.print(", ".join(f"{counts[state]} {state}" for state in STATES))
