"""``avatargen batch JOBS --out-dir DIR --ray``: the jobs of a batch run on a Ray cluster.

The driver (this process) joins the cluster (``batch.ray.address``, e.g. ``auto`` for the one ``ray start`` made
here; none: ``RAY_ADDRESS``, else a new local Ray on this machine, bound to 127.0.0.1), starts long-lived worker
actors (``bulk.ray_worker``: ``batch.ray.workers`` of them, each reserving ``batch.ray.num_cpus`` CPUs and
``batch.ray.num_gpus`` GPUs), streams the jobs file and hands each worker one job at a time: at most one job per
worker is in flight, so a file of any length costs the driver the memory of the jobs in flight. Every job goes
through the same runner as the file-lock workers (``bulk.runner``), so the out-dir -- a shared folder or a bucket --
holds the same files, ``avatargen batch status`` reads them, and a second driver, or file-lock workers, on the same
out-dir never render a job twice.

- A worker lost mid-job (its process, its raylet, its node): Ray starts it again where resources allow; the driver
  hands the job to a live worker at once, which claims it (its claim names this run) and resumes it from the last
  checkpoint its lost worker left (in a bucket: copied there at every checkpoint).
- A job that fails with bad input (exit 2) is recorded once and not retried; any other failure, or a lost worker, is
  tried again up to ``batch.max_retries`` times, then recorded with its reason.
- Ctrl-C: every worker stops its job at the next chunk, keeping its resume state, and the driver writes its report
  and exits 130; the same command continues the batch. A second Ctrl-C ends the driver at once (its claims in a
  bucket free themselves after ``storage.lease_s``)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator

from avatargen.bulk.jobs import Job
from avatargen.bulk.locations import Where
from avatargen.bulk.outdir import OutDir
from avatargen.bulk.ray_worker import RenderWorker, WorkerAnswer, WorkerSettings
from avatargen.bulk.remote_render import default_owner
from avatargen.bulk.results import ResultLog, progress_line, result_for
from avatargen.bulk.status import MANIFEST_NAME
from avatargen.bulk.batch_files import batch_jobs, manifest_chunks, open_out_dir, prepare_out_dir, write_report
from avatargen.bulk.workers import POLL_S
from avatargen.config.schema import Config, Device
from avatargen.errors import (EXIT_FAILURE, AvatarGenError, BadInputError, MissingExtraError, RenderInterrupted,
                              first_line)  # fmt: skip

INSTALL_HINT = "pip install 'avatargen[ray]'"
PING_S = 2.0  # how often a lost worker is asked whether Ray has started it again
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_CA_BUNDLE")  # fmt: skip


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtraError(
            f"--ray needs Ray on this machine and every node of the cluster: {INSTALL_HINT}"
        ) from None
    return ray


def connect(ray: Any, config: Config, debug: bool = False) -> str:
    """Join the cluster, or start a local one bound to loopback; returns what was joined."""
    address = config.batch.ray.address or os.environ.get("RAY_ADDRESS") or None
    settings = config.batch.ray
    env = {name: os.environ[name] for name in AWS_VARIABLES if name in os.environ} if settings.forward_aws_env else {}
    options: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=debug, include_dashboard=False,
                                   runtime_env={"env_vars": env} if env else None)  # fmt: skip
    try:
        if address is None:  # not Ray's own default, which joins the last cluster started here: a new one
            ray.init(address="local", _node_ip_address="127.0.0.1", **options)
            return "a local Ray on this machine"
        _check_reachable(address)
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise BadInputError(f"cannot join the Ray cluster at '{address}' ({first_line(err, 200)}); start it "
                            "(ray start --head) or fix batch.ray.address / --ray-address") from None  # fmt: skip
    return f"the Ray cluster at {address}"


def _check_reachable(address: str) -> None:
    """Refuse at once, in one line, a ``HOST:PORT`` where no cluster listens (Ray itself retries for minutes)."""
    if "://" in address or address == "auto" or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    target = host.strip("[]")
    if target in ("localhost", "127.0.0.1", "::1"):  # Ray joins these through this machine's network address
        try:
            from ray._common.network_utils import node_ip_address_from_perspective

            target = node_ip_address_from_perspective()
        except Exception:  # noqa: BLE001 - another Ray: probe the address as given
            pass
    try:
        socket.create_connection((target, int(port)), timeout=10).close()
    except (OSError, ValueError) as err:
        via = f" (Ray connects to {target}:{port})" if target != host.strip("[]") else ""
        raise BadInputError(f"no Ray cluster answers at '{address}'{via}: {getattr(err, 'strerror', None) or err}; "
                            "start it (ray start --head) or fix --ray-address / batch.ray.address") from None  # fmt: skip


def gpus_per_worker(config: Config, cluster: dict[str, float]) -> float:
    """``batch.ray.num_gpus``; null: 1 where the cluster (its ``cluster_resources()``) has GPUs and the render may use
    one (``runtime.device`` not cpu), else 0. A worker that reserves none gets ``CUDA_VISIBLE_DEVICES`` empty from
    Ray: on a GPU cluster it would render on its CPU."""
    chosen = config.batch.ray.num_gpus
    if chosen is not None:
        return chosen
    return 1.0 if cluster.get("GPU", 0) >= 1 and config.runtime.device != Device.cpu else 0.0


def worker_count(config: Config, cluster: dict[str, float], gpus: float) -> int:
    """``batch.ray.workers``, or as many workers of ``batch.ray.num_cpus`` CPUs and ``gpus`` GPUs as the cluster (its
    ``cluster_resources()``) fits."""
    settings = config.batch.ray
    if settings.num_cpus == 0 and gpus == 0:  # num_gpus=null resolved to 0: a cluster without GPUs, or device=cpu
        raise BadInputError("batch.ray.num_cpus=0 and the workers reserve no GPU (the cluster has none, or runtime."
                            "device=cpu): give each worker a CPU, or Ray places them all on one node")  # fmt: skip
    if settings.workers:
        return settings.workers
    fits = []
    if settings.num_cpus > 0:
        fits.append(int(cluster.get("CPU", 0) // settings.num_cpus))
    if gpus > 0:
        fits.append(int(cluster.get("GPU", 0) // gpus))
    count = min(fits)
    if count < 1:
        raise BadInputError(f"the Ray cluster has {cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} GPUs: "
                            f"not enough for one worker of batch.ray.num_cpus={settings.num_cpus:g}, "
                            f"batch.ray.num_gpus={gpus:g}; add nodes or lower them")  # fmt: skip
    return count


class DriverStop:
    """Ctrl-C / SIGTERM on the driver: the first asks the workers to stop at a chunk boundary, the second ends now."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> DriverStop:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


class Dispatcher:
    """The driver's loop: jobs to idle workers, results in, lost workers' jobs to live ones."""

    def __init__(self, ray: Any, workers: list[Any], jobs: Iterator[Job], outputs: OutDir, config: Config,
                 log: ResultLog, warn: Callable[[str], None], progress: Any, stop: DriverStop):  # fmt: skip
        self.ray, self.jobs, self.outputs, self.config, self.log = ray, jobs, outputs, config, log
        self.warn, self.progress, self.stop = warn, progress, stop
        self.idle: deque[Any] = deque(workers)
        self.retry: deque[tuple[Job, int]] = deque()  # jobs to give again before new ones (a lost worker's first)
        self.held: list[Job] = []  # jobs another run holds: looked at again every POLL_S
        self.in_flight: dict[Any, tuple[Job, int, Any]] = {}
        self.returning: dict[Any, Any] = {}  # where() pings of restarting workers
        self.lost: list[tuple[float, Any]] = []  # workers Ray is restarting: (when to ask again, worker)
        self.lost_workers = 0
        self.frames_done = 0  # frames of the jobs finished by this run: the cluster's rate
        self.exhausted = False
        self.held_at = 0.0

    def next_job(self) -> tuple[Job, int] | None:
        if self.retry:
            return self.retry.popleft()
        if not self.exhausted:
            job = next(self.jobs, None)
            if job is not None:
                return job, 1
            self.exhausted = True
        if self.held and time.monotonic() - self.held_at >= POLL_S:
            self.held_at = time.monotonic()
            self.retry.extend((job, 1) for job in self.held)
            self.held = []
            return self.retry.popleft()
        return None

    def dispatch(self) -> None:
        max_retries = self.config.batch.max_retries
        while self.idle and self.stop.signum is None:
            item = self.next_job()
            if item is None:
                return
            job, attempt = item
            worker = self.idle.popleft()
            self.in_flight[worker.run.remote(job, attempt, attempt > max_retries)] = (job, attempt, worker)

    def done(self) -> bool:
        return not self.in_flight and (
            self.stop.signum is not None or (self.exhausted and not self.retry and not self.held)
        )

    def run(self) -> None:
        stopped = False
        while not self.done():
            if self.stop.signum is not None and not stopped:
                stopped = True
                self.warn("avatargen batch: stopping: each worker finishes its chunk and keeps its job's resume state; "
                          "run the same command to continue (Ctrl-C again ends now)")  # fmt: skip
                for _, _, worker in self.in_flight.values():
                    worker.stop.remote()
            self.dispatch()
            self._ping_lost()
            waiting = list(self.in_flight) + list(self.returning)
            if not waiting:
                if not self.idle and not self.lost:
                    raise AvatarGenError("every Ray worker of this batch is gone; check the cluster (ray status) and "
                                         "run the same command again: jobs resume from their checkpoints")  # fmt: skip
                time.sleep(0.2)  # jobs another run holds, or lost workers not back yet: look again soon
                continue
            ready, _ = self.ray.wait(waiting, num_returns=1, timeout=0.5)
            for ref in ready:
                if ref in self.returning:
                    self._returned(ref)
                else:
                    self._answered(ref)
            self.progress.update(self)

    def _returned(self, ref: Any) -> None:
        worker = self.returning.pop(ref)
        try:
            self.ray.get(ref)
            self.idle.append(worker)
        except self.ray.exceptions.RayError:
            self.lost.append((time.monotonic() + PING_S, worker))  # not back yet: ask again in a while

    def _ping_lost(self) -> None:
        """Ask the lost workers whose time has come whether Ray has started them again."""
        now = time.monotonic()
        for when, worker in [item for item in self.lost if item[0] <= now]:
            self.lost.remove((when, worker))
            self.returning[worker.where.remote()] = worker

    def _answered(self, ref: Any) -> None:
        job, attempt, worker = self.in_flight.pop(ref)
        max_retries = self.config.batch.max_retries
        try:
            answer: WorkerAnswer = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:  # the worker died (its process, raylet or node)
            self.lost_workers += 1
            self.lost.append((time.monotonic(), worker))  # Ray restarts it; it takes jobs again once it answers
            if self.stop.signum is not None:
                return  # stopping: the job resumes on the next run
            reason = first_line(error, 160)
            if attempt > max_retries:
                error_text = f"its worker was lost {attempt} times (last: {reason}); batch.max_retries={max_retries}"
                self.outputs.record_failure(job.claimed_as, error_text, EXIT_FAILURE)
                self._record(result_for(job, 0, "failed", time.perf_counter(), error=error_text, exit_code=EXIT_FAILURE,
                                        ran=True, attempts=attempt), job)  # fmt: skip
                return
            self.warn(f"avatargen batch: job {job.index} lost its worker ({reason}); resuming it on another "
                      f"(attempt {attempt + 1})")  # fmt: skip
            self.retry.appendleft((job, attempt + 1))
            return
        self.idle.append(worker)
        for note in answer.notes:
            self.warn(note)
        result = answer.result
        if result is None:
            self.held.append(job)
            self.held_at = time.monotonic()
            return
        if result.status == "failed" and result.exit_code != 2 and attempt <= max_retries and self.stop.signum is None:
            self.warn(f"avatargen batch: job {job.index} failed ({result.error}); trying again (attempt {attempt + 1})")
            self.retry.append((job, attempt + 1))
            return
        self._record(result, job)

    def _record(self, result: Any, job: Job) -> None:
        self.log.add(result)
        self.frames_done += (result.frames or 0) if result.ran else 0
        if result.ran:
            self.warn(progress_line(job, result, f"worker {result.worker}"))


def _counting(jobs: Iterator[Job], last: list[Job]) -> Iterator[Job]:
    for job in jobs:
        last[:] = [job]
        yield job


def run_on_ray(jobs_file: Where, out_dir: Where, overrides: list[str], config: Config, warn: Callable[[str], None],
               allow_outside: bool, retry_failed: bool, resume_command: str, overwrite: bool) -> int:  # fmt: skip
    """Run the batch on Ray (see the module's docstring); the batch's exit code, or 130/143 when stopped."""
    from avatargen.bulk.progress import BatchProgress

    ray = import_ray()
    outputs = open_out_dir(out_dir, config)
    jobs = lambda: batch_jobs(jobs_file, out_dir, config, allow_outside, overwrite)  # noqa: E731
    prepare_out_dir(outputs, jobs_file, overwrite)  # the bucket and its credentials are checked before Ray starts
    next(jobs(), None)  # so is the jobs file
    joined = connect(ray, config)
    log = ResultLog()
    code, count, unstarted = EXIT_FAILURE, 0, 0
    with DriverStop() as stop:
        try:
            cluster = ray.cluster_resources()
            gpus = gpus_per_worker(config, cluster)
            workers_wanted = worker_count(config, cluster, gpus)
            threads = config.runtime.threads or max(1, int(config.batch.ray.num_cpus))
            settings = WorkerSettings((*overrides, f"runtime.threads={threads}"), out_dir, f"ray-{default_owner()}",
                                      None if allow_outside else out_dir, time.time() if retry_failed else None,
                                      resume_command)  # fmt: skip
            remote = ray.remote(num_cpus=config.batch.ray.num_cpus, num_gpus=gpus,
                                max_restarts=-1, max_task_retries=0, max_concurrency=2)(RenderWorker)  # fmt: skip
            workers = [remote.remote(settings) for _ in range(workers_wanted)]  # they start while the jobs are counted
            counted: list[Job] = []  # the jobs are counted while the manifest streams them: only the last is held
            outputs.write_side(
                MANIFEST_NAME, manifest_chunks(_counting(jobs(), counted))
            )  # for `avatargen batch status`
            count = len(counted) and counted[0].index + 1
            warn(f"avatargen batch: {count} job(s) on {joined}: {workers_wanted} worker(s) of "
                 f"{config.batch.ray.num_cpus:g} CPU, {gpus:g} GPU")  # fmt: skip
            with BatchProgress(count, enabled=sys.stderr.isatty()) as progress:
                dispatcher = Dispatcher(ray, workers, jobs(), outputs, config, log, warn, progress, stop)
                dispatcher.run()
            stopped = None if stop.signum is None else 128 + stop.signum
            unstarted = max(0, count - len(log))
            code = write_report(outputs, log, {"jobs_file": str(jobs_file), "out_dir": str(out_dir), "engine": "ray",
                                               "ray": joined, "workers": workers_wanted, "worker": "driver",
                                               "lost_workers": dispatcher.lost_workers, "jobs_total": count,
                                               "not_started": unstarted}, stopped)  # fmt: skip
        finally:
            ray.shutdown()
    if stop.signum is not None:
        name = signal.Signals(stop.signum).name
        raise RenderInterrupted(f"batch stopped by {name}: {log.counts['stopped']} job(s) kept their resume state"
                                + (f", {unstarted} not started" if unstarted else "")
                                + f"; continue with: {resume_command}", 128 + stop.signum)  # fmt: skip
    return code
