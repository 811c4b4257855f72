"""``python -m smc batch --ray [ADDRESS]``: the batch runner's job on a Ray cluster.

One Ray actor per GPU (or per ``cpus_per_worker`` CPUs) builds the LM once, from a picklable
factory (a callable, or ``"module:function"`` imported in the worker), and answers lines with
the in-process runner's ``smc.api.batch.answer``, up to ``in_flight`` at once, in its own event
loop: they share that worker's forward passes (``GatheredLM``) exactly as in one process. The driver
(this process) reads and repairs the output (``open_job``: the same resume rules), feeds lines
to the actors with at most ``in_flight`` outstanding per actor, and writes every answer to the
one output file as it comes back, whole (``ResultWriter``).

Why actors and not Ray Data: a batch job here is a stream of independent requests whose
results must reach one file, each line whole, as soon as it is answered, with the exact
resume rules of the in-process runner; the unit of work is a request (not a block of rows),
and a worker must keep many requests in flight in one event loop so their particles share
forward passes. Long-lived actors fed by the driver give that directly; Ray Data's
``map_batches`` would hand each actor blocks, write its own set of files, and own the retry
policy.

Faults. A request whose actor dies (a crashed process, a lost node, ``ray.kill``) goes back to
the queue and runs on another actor; a dead actor is replaced while replacements last
(``max_restarts`` in all). A request that has killed ``max_attempts`` actors is written as a
500 error line instead of being tried forever. Each result is computed from its own request
and seed, so which actor answers it does not change it, and each custom_id is written once.

Ray is an optional dependency (``pip install smc-steer[ray]``): it is imported inside the
functions here, so the CLI can import this module whether or not Ray is installed.
"""

from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from smc.api.batch import (Answer, BatchJob, BatchLine, BatchSummary, Progress, Tally, answer,
                           check_concurrency, check_timeout, open_job, resolve_factory, result_line,
                           shared_forwards)
from smc.api.openai import ApiError
from smc.backends.base import LMBackend
from smc.core import defaults
from smc.core.errors import InvalidArgument

log = logging.getLogger("smc.batch")

#: the name of the k-th actor a job starts (Ray names are per namespace; a driver's jobs run
#: one after another, and each kills its actors at its end)
WORKER_NAME = "smc-batch-worker-{}"


class BatchWorker:
    """One worker's state: the LM, built once in the worker from ``factory(*args, **kwargs)``,
    and the runner's settings. Made a Ray actor by ``ray.remote`` in ``run_batch_ray``; its
    async methods run in the actor's one event loop."""

    def __init__(self, factory: str | Callable[..., LMBackend], args: Sequence[Any],
                 kwargs: Mapping[str, Any], model_name: str, timeout: float | None, in_flight: int):
        # the view refers to the backend weakly: the worker holds the backend itself
        self.backend = resolve_factory(factory)(*args, **kwargs)
        self.lm = shared_forwards(self.backend, in_flight)
        self.model_name, self.timeout = model_name, timeout

    def ready(self) -> int:
        """The worker's process id, once its LM is loaded."""
        return os.getpid()

    async def answer(self, item: BatchLine) -> Answer:
        return await answer(item, self.lm, self.model_name, timeout=self.timeout)


@dataclass(frozen=True)
class Cluster:
    """How the job uses the cluster.

    Attributes:
        workers: actors (each loads the model once).
        cpus_per_worker: CPUs each actor reserves.
        gpus_per_worker: GPUs each actor reserves (a tensor-parallel vLLM engine takes its
            tensor_parallel_size of them).
    """

    workers: int
    cpus_per_worker: float
    gpus_per_worker: float


def plan(resources: Mapping[str, float], workers: int | None, cpus_per_worker: float,
         gpus_per_worker: float | None) -> Cluster:
    """The actors a cluster with ``resources`` (``ray.cluster_resources()``) runs: with GPUs,
    one per ``gpus_per_worker`` GPUs (default 1); without, one per ``cpus_per_worker`` CPUs;
    ``workers`` overrides the count."""
    gpus = float(resources.get("GPU", 0))
    if gpus_per_worker is None:
        gpus_per_worker = 1.0 if gpus >= 1 else 0.0
    if cpus_per_worker <= 0 or gpus_per_worker < 0:
        raise InvalidArgument("cpus_per_worker must be > 0 and gpus_per_worker >= 0")
    if workers is None:
        if gpus_per_worker > 0:
            workers = int(gpus // gpus_per_worker)
        else:
            workers = int(float(resources.get("CPU", 1)) // cpus_per_worker)
        workers = max(workers, 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidArgument(f"workers must be an integer >= 1, got {workers!r}")
    return Cluster(workers, float(cpus_per_worker), float(gpus_per_worker))


def run_batch_ray(
    input: str | os.PathLike,
    output: str | os.PathLike,
    factory: str | Callable[..., LMBackend],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    model_name: str,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: float = 1,
    gpus_per_worker: float | None = None,
    in_flight: int = defaults.BATCH_CONCURRENCY,
    timeout: float | None = None,
    retry_errors: bool = False,
    progress: bool | None = None,
    max_attempts: int = 3,
    max_restarts: int | None = None,
    on_answer: Callable[[Answer], None] | None = None,
    fsync: bool = True,
) -> BatchSummary:
    """Answer a batch file on Ray actors; the output is what ``run_batch`` writes.

    Args:
        input, output, model_name, timeout, retry_errors, progress, fsync: as ``run_batch``.
        factory: builds the LM in each worker: a picklable callable or ``"module:function"``
            (importable on every node), called as ``factory(*args, **kwargs)``; e.g.
            ``smc.load_lm`` with ``("org/name",)`` and ``{"backend": "vllm"}``.
        address: the cluster (``ray.init(address)``; None: RAY_ADDRESS, else a local Ray).
            When Ray is already initialized in this process it is used as it is.
        workers: actors (default: one per GPU, or per ``cpus_per_worker`` CPUs).
        cpus_per_worker, gpus_per_worker: what each actor reserves (``plan``).
        in_flight: requests outstanding per actor (they share its forward passes).
        max_attempts: actors a request may see die before it is written as a 500 error line.
        max_restarts: dead actors replaced in all (default: ``workers``).
        on_answer: called in the driver with each Answer after its line is written.
    """
    import ray  # optional dependency: only this runner needs it
    from ray.exceptions import RayActorError, RayTaskError

    check_concurrency(in_flight)
    timeout = check_timeout(timeout)
    factory_kwargs = dict(kwargs or {})
    resolve_factory(factory)  # a typo in "module:function" fails here, before Ray starts
    started = False
    if not ray.is_initialized():
        ray.init(address=address)
        started = True
    try:
        with open_job(input, output, retry_errors=retry_errors, fsync=fsync) as job:
            cluster = plan(ray.cluster_resources(), workers, cpus_per_worker, gpus_per_worker)
            if not job.pending:
                return Tally().summary(job)
            # max_restarts=0: a dead actor is replaced by the driver, which knows its requests
            options = dict(num_cpus=cluster.cpus_per_worker, num_gpus=cluster.gpus_per_worker,
                           max_concurrency=in_flight + 1, max_restarts=0)
            remote = (ray.remote(BatchWorker), options)
            return Driver(ray, RayActorError, RayTaskError, job, remote,
                          (factory, tuple(args), factory_kwargs, model_name, timeout, in_flight), cluster,
                          in_flight, max_attempts, cluster.workers if max_restarts is None else max_restarts,
                          progress, on_answer).run()
    finally:
        if started:
            ray.shutdown()


class Driver:
    """The driver's loop: feed lines to actors, write answers, requeue the lines of dead ones."""

    def __init__(self, ray: Any, actor_error: type, task_error: type, job: BatchJob, remote: Any,
                 init_args: tuple, cluster: Cluster, in_flight: int, max_attempts: int,
                 max_restarts: int, progress: bool | None, on_answer: Callable[[Answer], None] | None):
        self.ray, self.actor_error, self.task_error = ray, actor_error, task_error
        self.job, self.remote, self.init_args, self.in_flight = job, remote, init_args, in_flight
        self.max_attempts, self.restarts_left, self.on_answer = max_attempts, max_restarts, on_answer
        self.queue: collections.deque[BatchLine] = collections.deque(job.pending)
        self.attempts: collections.Counter[str] = collections.Counter()
        self.started = 0
        self.actors: dict[Any, int] = {}  # live actor -> its requests outstanding
        self.pending: dict[Any, tuple[Any, BatchLine]] = {}  # ObjectRef -> (actor, line)
        self.tally = Tally()
        self.bar = Progress(len(job.lines), job.already, progress, job.kept_errors)
        for _ in range(min(cluster.workers, len(job.pending))):
            self.start_actor()
        try:  # every worker loads the model before any request is sent (a bad model fails once)
            ray.get([actor.ready.remote() for actor in self.actors])
        except (actor_error, task_error) as e:
            self.bar.close()
            for actor in self.actors:
                ray.kill(actor)
            raise RuntimeError(f"a Ray worker could not build the LM: {str(e).strip().splitlines()[-1]}") from None

    def start_actor(self) -> None:
        cls, options = self.remote
        actor = cls.options(**options, name=WORKER_NAME.format(self.started)).remote(*self.init_args)
        self.started += 1
        self.actors[actor] = 0

    def run(self) -> BatchSummary:
        try:
            while self.queue or self.pending:
                self.feed()
                if not self.pending:
                    raise RuntimeError("every Ray worker died and no replacement is left "
                                       f"({len(self.queue)} requests not answered; rerun to resume)")
                done, _ = self.ray.wait(list(self.pending), num_returns=1)
                for ref in done:
                    self.collect(ref)
            return self.tally.summary(self.job)
        finally:
            self.bar.close()
            for actor in list(self.actors):
                self.ray.kill(actor)

    def feed(self) -> None:
        for actor in list(self.actors):
            while self.queue and self.actors.get(actor, self.in_flight) < self.in_flight:
                item = self.queue.popleft()
                self.pending[actor.answer.remote(item)] = (actor, item)
                self.actors[actor] += 1

    def collect(self, ref: Any) -> None:
        actor, item = self.pending.pop(ref)
        if actor in self.actors:
            self.actors[actor] -= 1
        try:
            got: Answer = self.ray.get(ref)
        except self.actor_error as e:
            self.lost(actor, item, e)
            return
        except self.task_error as e:  # answer() itself failed: a bug; the request's line says so
            log.error("request %r failed in its worker: %s", item.custom_id, e)
            err = ApiError(f"internal error in the Ray worker ({type(e).__name__})", 500,
                           type="internal_server_error")
            got = Answer(item.custom_id, result_line(item.custom_id, err.status, err.body()), False)
        self.write(got)

    def lost(self, actor: Any, item: BatchLine, error: BaseException) -> None:
        """``item``'s actor died: drop the actor (replace it while replacements last) and run
        ``item`` again elsewhere, unless it has seen ``max_attempts`` actors die."""
        if actor in self.actors:
            log.warning("a Ray worker died (%s); its requests go to the others", type(error).__name__)
            del self.actors[actor]
            if self.restarts_left > 0:
                self.restarts_left -= 1
                self.start_actor()
        self.attempts[item.custom_id] += 1
        if self.attempts[item.custom_id] < self.max_attempts:
            self.queue.appendleft(item)
            self.tally.reassigned += 1
            return
        err = ApiError(f"the worker running this request died {self.attempts[item.custom_id]} times "
                       "(out of memory?); it was not tried again", 500, type="internal_server_error",
                       code="worker_died")
        self.write(Answer(item.custom_id, result_line(item.custom_id, err.status, err.body()), False))

    def write(self, got: Answer) -> None:
        self.job.writer.write(got.line)
        self.tally.add(got)
        self.bar.update(got.ok, got.tokens)
        if self.on_answer is not None:
            self.on_answer(got)

