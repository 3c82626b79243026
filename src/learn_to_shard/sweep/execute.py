"""Run many independent tasks on local worker processes or as Ray tasks, one code path.

:func:`execute` submits every item, then collects results as they finish through one
``concurrent.futures.as_completed`` loop; only the submission differs:

* local (default): a :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers``
  processes started with ``spawn`` (a fresh interpreter each, as Ray workers are: nothing of
  the parent's torch or thread state is inherited);
* Ray (``ray_address`` given, ``"auto"`` or ``HOST:PORT``): ``ray.init(address=…)`` joins an
  existing cluster and each item becomes a Ray task of one CPU
  (``ray.remote(num_cpus=1)``); ``ObjectRef.future()`` turns each into a
  ``concurrent.futures.Future``. The cluster's CPUs bound the parallelism. The package must be
  importable on every node (``pip install -e '.[ray]'`` there).

Each worker runs one item at a time with one intra-op thread (``OMP_NUM_THREADS=1``; Ray sets
it for one-CPU tasks itself), so results do not depend on the placement.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")

#: Environment of local workers: one BLAS/OpenMP thread each.
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _init_worker() -> None:
    for name in _THREAD_ENV:
        os.environ[name] = "1"


def _ray():  # -> the ray module
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray-address: Ray is not installed; install the extra with "
                          "pip install -e '.[ray]'") from None
    return ray


@contextmanager
def _local(workers: int) -> Iterator[Callable[[Callable[[T], R], T], Future[R]]]:
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker)
    try:
        yield pool.submit
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: Seconds :func:`_reachable` waits for a Ray address to accept a connection (ray.init itself
#: retries an unreachable GCS without end, printing warnings).
RAY_CONNECT_TIMEOUT_S = 10.0


def _reachable(address: str) -> None:
    """Refuse a ``HOST:PORT`` (or ``ray://HOST:PORT``) Ray address that accepts no TCP
    connection within :data:`RAY_CONNECT_TIMEOUT_S`; ``auto`` and other forms are left to
    ``ray.init``.

    Raises:
        ConfigError: naming ``--ray-address``, the address and the reason.
    """
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)),
                                 timeout=RAY_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError, OverflowError) as exc:
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror
                  else str(exc) or type(exc).__name__)
        raise ConfigError(f"--ray-address {address}: no Ray cluster answers there ({reason}); "
                          f"start one (ray start --head) or give its address") from None


@contextmanager
def _on_ray(address: str) -> Iterator[Callable[[Callable[[T], R], T], Future[R]]]:
    _reachable(address)                 # before importing Ray, which is slow to start
    ray = _ray()
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"--ray-address {address}: cannot join a Ray cluster: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                          ) from None
    remotes: dict[Callable[..., Any], Any] = {}
    refs: list[Any] = []

    def submit(fn: Callable[[T], R], item: T) -> Future[R]:
        if fn not in remotes:
            remotes[fn] = ray.remote(num_cpus=1)(fn)
        ref = remotes[fn].remote(item)
        refs.append(ref)
        return ref.future()

    try:
        yield submit
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        ray.shutdown()


def execute(fn: Callable[[T], R], items: Sequence[T], *, workers: int = 1,
            ray_address: str | None = None,
            on_result: Callable[[T, R], None] | None = None,
            on_error: Callable[[T, BaseException], R] | None = None) -> list[R]:
    """Run ``fn`` on every item, in parallel, and hand each result to ``on_result`` as soon as
    it is ready (in completion order).

    Args:
        fn: a module-level function (it is pickled by reference).
        items: the inputs (picklable).
        workers: local worker processes (ignored with ``ray_address``).
        ray_address: ``None`` for local processes, else a Ray address (``auto`` or
            ``HOST:PORT``) of a running cluster.
        on_result: called in this process for each finished item.
        on_error: turns an exception of one item (raised by ``fn``, or a worker that died)
            into its result, so the other items go on; without it the exception is re-raised
            after the pool is shut down.

    Returns:
        The results in the order of ``items``.

    Raises:
        ConfigError: ``workers < 1``; Ray asked for but not installed or not reachable.
    """
    if workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    results: dict[int, R] = {}
    if not items:
        return []
    backend = _local(min(workers, len(items))) if ray_address is None else _on_ray(ray_address)
    with backend as submit:
        futures = {submit(fn, item): i for i, item in enumerate(items)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except Exception as exc:   # noqa: BLE001 -- handed to on_error, or re-raised
                if on_error is None:
                    raise
                results[i] = on_error(items[i], exc)
            if on_result is not None:
                on_result(items[i], results[i])
    return [results[i] for i in range(len(items))]
