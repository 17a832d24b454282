"""Running a sweep's trials: in local worker processes or on a Dask distributed cluster.

Each trial runs in a worker as :func:`run_job`, which returns the finished trial's files as bytes
(or its error). Only the process that runs the sweep writes to the output directory, committing
each trial to the :class:`~cctestbed.sweep.store.Store` as it arrives, so a local run and a cluster run
produce the same directory, and killing the sweep loses at most the trials still running.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import platform
import signal
import tempfile
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from .spec import Sweep, TrialSpec

#: A trial whose worker process dies this many times is recorded as failed.
MAX_CRASHES = 2
#: Trials handed to the executor ahead, per worker: enough to keep every worker busy.
JOBS_AHEAD = 2
#: How long to wait for a Dask scheduler to answer.
DASK_CONNECT_TIMEOUT_S = 5
#: Dask scheduler addresses: scheme://host:port.
CLUSTER_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|ucx)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})$")
#: Fixed cost of a trial besides simulating and writing: validation, hand-over, commit.
PER_TRIAL_S = 0.05


# --- the work of one trial (runs in a worker) --------------------------------------------------


def _versions() -> dict[str, str]:
    from .. import __version__, core_version

    return {"cctestbed": __version__, "core": core_version()}


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one trial and return its files as bytes, or its error; never raises for a failing trial.

    ``job``: ``key``, ``trial`` (a trial dict as in a trial file), ``trial_plot`` (draw trial.png),
    ``telemetry`` (``summary``: no time series files);
    ``kind = "baseline"``: a baseline of ``sweep --judge`` (:func:`cctestbed.sweep.judge.run_baseline_job`).
    """
    if job.get("kind") == "baseline":
        from .judge import run_baseline_job

        return run_baseline_job(job)
    started = time.time()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"key": job["key"], "host": platform.node(), "pid": os.getpid()}
    try:
        from ..config import parse_trial
        from .metrics import sweep_metrics
        from ..runner import run_trial

        trial = parse_trial(job["trial"], allow_large=True)  # the sweep checked its size
        result = run_trial(trial)
        metrics = sweep_metrics(result.flows, result.router, result.info)
        with tempfile.TemporaryDirectory(prefix="cctestbed-job-") as tmp:
            # the files `cctestbed run` writes (kernel.json too, from the kernel backend)
            result.write_files(Path(tmp), plot=bool(job.get("trial_plot")),
                               series=job.get("telemetry", "full") == "full")
            files: dict[str, bytes] = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())}
        files["metrics.json"] = (json.dumps(metrics, indent=1, allow_nan=False) + "\n").encode()
        elapsed = time.perf_counter() - t0
        run = {"key": job["key"], "elapsed_s": round(elapsed, 3), "started": started, **out, **_versions()}
        files["run.json"] = (json.dumps(run, indent=1) + "\n").encode()
        out.update(status="done", files=files, elapsed_s=elapsed)
    except Exception as e:  # the sweep records it and goes on
        out.update(
            status="failed",
            error=_error_text(e),
            traceback=traceback.format_exc(),
            elapsed_s=time.perf_counter() - t0,
        )
    return out


def _error_text(e: BaseException) -> str:
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _worker_init(parent: int) -> None:
    """Set up a worker process: Ctrl-C is the sweep's to handle, and the worker ends with its parent."""
    # Ctrl-C reaches the whole process group; the sweep process alone decides what to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # already so when started by run_local
    _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """End this process when ``parent`` (the sweep) dies, even by SIGKILL: a worker must not go on
    simulating for nobody. Linux: PR_SET_PDEATHSIG; elsewhere a thread watching the parent pid."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="cctestbed-parent-watch", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was arranged
        os._exit(1)


def make_job(spec: TrialSpec, trial_plot: bool = False, telemetry: str = "full") -> dict[str, Any]:
    return {"key": spec.key, "trial": spec.trial_dict, "trial_plot": trial_plot, "telemetry": telemetry}


# --- executors ---------------------------------------------------------------------------------


def run_local(jobs: Iterable[dict[str, Any]], workers: int) -> Iterator[dict[str, Any]]:
    """Outcomes of ``jobs`` as they finish, from ``workers`` spawned processes.

    Jobs are taken from ``jobs`` as workers come free (:data:`JOBS_AHEAD` per worker handed over
    ahead) and each outcome is let go once yielded, so what this holds does not grow with the
    number of jobs. A worker process that dies (killed, out of memory) breaks the pool: the
    trials it held are tried again in a new pool, and recorded as failed after
    :data:`MAX_CRASHES` deaths.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    jobs = iter(jobs)
    retry: deque[dict[str, Any]] = deque()
    crashes: dict[str, int] = {}

    def take() -> Optional[dict[str, Any]]:
        return retry.popleft() if retry else next(jobs, None)

    while True:
        job = take()
        if job is None:
            return
        first = [job]
        while len(first) < workers * JOBS_AHEAD and (job := take()) is not None:
            first.append(job)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))
        in_flight: dict[Any, dict[str, Any]] = {}  # future -> job, in the order handed over
        # Futures seen handed to a worker; when the pool breaks, these are the suspects (the
        # queued ones fail with it without having run).
        started: set[Any] = set()
        broken = False

        def submit(j: dict[str, Any]) -> bool:
            """Hand ``j`` to the pool; False (and ``j`` back at the head of the retry queue) when
            the pool broke since it was last looked at: submit then raises BrokenProcessPool."""
            try:
                in_flight[pool.submit(run_job, j)] = j
                return True
            except BrokenProcessPool:
                retry.appendleft(j)
                return False

        try:
            with _sigint_ignored():  # the workers start (on the first submits) deaf to Ctrl-C
                for i, j in enumerate(first):
                    if not submit(j):
                        broken = True
                        retry.extendleft(reversed(first[i + 1:]))
                        break
            while in_flight:
                done, _ = wait(in_flight, timeout=0.25, return_when=FIRST_COMPLETED)
                started.update(f for f in in_flight if f.running())
                for fut in [f for f in in_flight if f in done]:
                    try:
                        res = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    del in_flight[fut]
                    started.discard(fut)
                    yield res
                if broken:
                    break
                while len(in_flight) < workers * JOBS_AHEAD and (job := take()) is not None:
                    if not submit(job):
                        broken = True
                        break
        finally:
            if broken:
                pool.shutdown(wait=False, cancel_futures=True)
            else:
                _stop(pool)
        if not broken:
            return
        # every job still held fails with the pool: the ones that had started are the suspects
        suspects = [f for f in in_flight if f in started] or list(in_flight)[:workers]
        for fut, job in in_flight.items():
            if fut in suspects:
                crashes[job["key"]] = crashes.get(job["key"], 0) + 1
            if crashes.get(job["key"], 0) >= MAX_CRASHES:
                yield {"key": job["key"], "status": "failed",
                       "error": f"the worker process died {MAX_CRASHES} times while running this trial "
                                "(killed, or out of memory)"}
            else:
                retry.append(job)


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while worker processes are started: they inherit the ignored signal (and
    Python leaves it so), so a Ctrl-C while they load reaches none of them; the sweep process
    alone decides what to stop. A Ctrl-C within these few milliseconds is dropped."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Shut a pool down without waiting for trials still running (they are lost, not half-written)."""
    procs = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def check_cluster_address(address: str) -> None:
    """Raise ValueError unless ``address`` reads as a Dask scheduler address, scheme://host:port."""
    if re.match(r"^inproc://\S+$", address):  # a cluster in this process (LocalCluster(processes=False))
        return
    m = CLUSTER_ADDRESS.match(address)
    if m is None or not 0 < int(m.group(3)) < 65536:
        raise ValueError(
            f"--cluster {address!r} is not a Dask scheduler address; give scheme://host:port with scheme "
            "tcp, tls, ws, wss or ucx, e.g. tcp://host:8786"
        )


#: Most bytes a Dask scheduler's handshake takes (it is a few hundred): a larger length read from
#: the peer says it speaks another protocol ("HTTP/1.1" read as a length is 3.07 EiB).
MAX_HANDSHAKE_BYTES = 1 << 20


def _unreachable(address: str, timeout: float, why: str) -> RuntimeError:
    return RuntimeError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s: {why}")


def probe_scheduler(address: str, timeout: float = DASK_CONNECT_TIMEOUT_S) -> None:
    """Raise RuntimeError (one line, saying why) unless a Dask scheduler answers at ``address``
    within ``timeout`` seconds, before Dask's client is started: a scheduler sends its handshake
    as soon as a connection opens, so this connects (tcp, tls, ws, wss), and for tcp and tls reads
    the handshake's length and frames, bounded in size and time. Something else listening (an HTTP
    server or proxy, a silent service) is refused by what it sends or by its silence, where Dask's
    client would wait without end or try to allocate exabytes; tls/wss without Dask's TLS
    settings and ucx without its package are refused at once."""
    import socket
    import ssl
    import struct

    scheme = address.split("://", 1)[0]
    m = CLUSTER_ADDRESS.match(address)
    if m is None:  # inproc://, checked elsewhere
        return
    host, port = m.group(2).strip("[]"), int(m.group(3))
    if scheme == "ucx":
        import importlib.util

        if not any(importlib.util.find_spec(x) for x in ("distributed_ucxx", "ucp")):
            raise RuntimeError(f"--cluster {address}: ucx:// needs the distributed-ucxx package, which is not "
                               "installed here; use tcp://")
        return
    ctx: Optional[ssl.SSLContext] = None
    if scheme in ("tls", "wss"):
        from distributed.security import Security

        ctx = Security().get_connection_args("client").get("ssl_context")
        if ctx is None:
            raise RuntimeError(
                f"--cluster {address}: {scheme}:// needs Dask's TLS settings (distributed.comm.tls.ca-file, "
                "distributed.comm.tls.client.cert and .key in the Dask configuration) and none are set; "
                "set them or use tcp://"
            )
    deadline = time.monotonic() + timeout

    def left() -> float:
        r = deadline - time.monotonic()
        if r <= 0:
            raise socket.timeout()
        return r

    try:
        sock = socket.create_connection((host, port), timeout=left())
    except socket.timeout:
        raise _unreachable(address, timeout, "no answer") from None
    except OSError as e:
        raise _unreachable(address, timeout, e.strerror or _error_text(e)) from None
    try:
        if ctx is not None:
            sock.settimeout(left())
            sock = ctx.wrap_socket(sock, server_hostname=host if ctx.check_hostname else None)
        if scheme in ("ws", "wss"):  # a WebSocket's handshake is Dask's client's to make
            return

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                sock.settimeout(left())
                chunk = sock.recv(n - len(buf))
                if not chunk:
                    raise ConnectionError("the connection was closed")
                buf += chunk
            return buf

        head = read(8)
        (size,) = struct.unpack("<Q", head)
        if head[:4] in (b"HTTP", b"<!DO", b"<htm", b"<HTM"):
            raise _unreachable(address, timeout, "an HTTP server answers there, not a Dask scheduler")
        if not 0 < size <= MAX_HANDSHAKE_BYTES:
            raise _unreachable(address, timeout, "what answers there does not speak Dask's protocol")
        from distributed.protocol import loads
        from distributed.protocol.utils import unpack_frames

        frames, more = unpack_frames(read(size), partial=True)
        if more or not isinstance(loads(frames), dict):
            raise ValueError("not a handshake")
    except RuntimeError:
        raise
    except socket.timeout:
        raise _unreachable(address, timeout, "something listens there but sent no Dask handshake") from None
    except ssl.SSLError as e:
        raise _unreachable(address, timeout, f"TLS failed: {e.reason or e}") from None
    except OSError as e:
        raise _unreachable(address, timeout, e.strerror or _error_text(e)) from None
    except Exception:  # a length that is not followed by Dask's frames
        raise _unreachable(address, timeout, "what answers there does not speak Dask's protocol") from None
    finally:
        sock.close()


@functools.lru_cache(maxsize=1)
def _client_class() -> Any:
    """Dask's ``Client``, whose failed start leaves nothing to close: Dask's own ``__del__`` would
    otherwise wait 10 s on the stopped event loop and print a traceback."""
    from distributed import Client

    class _Client(Client):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().__init__(*args, **kwargs)
            except BaseException:
                self.status = "closed"
                try:
                    self._loop_runner.stop()
                except Exception:
                    pass
                raise

    return _Client


def connect(cluster: Any, timeout: Optional[float] = None) -> Any:
    """A Dask ``Client`` of ``cluster`` (an address like ``tcp://host:8786``, or a cluster object
    such as ``LocalCluster``) whose workers run this cctestbed; RuntimeError saying why not."""

    timeout = DASK_CONNECT_TIMEOUT_S if timeout is None else timeout
    if isinstance(cluster, str):
        try:
            check_cluster_address(cluster)
        except ValueError as e:
            raise RuntimeError(str(e)) from None
    if isinstance(cluster, str):
        probe_scheduler(cluster, timeout)
    try:
        client = _client_class()(cluster, set_as_default=False, timeout=timeout)
    except Exception as e:  # OSError, TimeoutError, a refused handshake, ...
        raise RuntimeError(f"cannot reach the Dask scheduler at {cluster} within {timeout:g} s: {_error_text(e)}") from None
    try:
        mine = _versions()
        theirs = client.run(_versions)
        if not theirs:
            raise RuntimeError(f"the cluster at {client.scheduler.address} has no workers")
        odd = {w: v for w, v in theirs.items() if v != mine}
        if odd:
            w, v = next(iter(odd.items()))
            raise RuntimeError(
                f"worker {w} runs cctestbed {v['cctestbed']} (core {v['core']}); this machine runs "
                f"{mine['cctestbed']} (core {mine['core']}); install the same version on every worker"
            )
    except BaseException:
        client.close()
        raise
    return client


def run_dask(jobs: Iterable[dict[str, Any]], cluster: Any) -> Iterator[dict[str, Any]]:
    """Outcomes of ``jobs`` from a Dask distributed cluster: a connected ``Client`` (see
    :func:`connect`; left open), an address like ``tcp://host:8786``, or a cluster object such as
    ``LocalCluster``. Workers need the same cctestbed installed. Jobs are submitted as others
    finish (:data:`JOBS_AHEAD` per worker thread ahead), as :func:`run_local` does."""
    import uuid

    from distributed import Client, as_completed

    own = not isinstance(cluster, Client)
    client = connect(cluster) if own else cluster
    try:
        tag = uuid.uuid4().hex[:8]
        jobs = iter(jobs)
        in_flight: dict[Any, dict[str, Any]] = {}
        finished = as_completed(loop=client.loop)

        def submit(job: dict[str, Any]) -> None:
            fut = client.submit(run_job, job, key=f"cctestbed-{job['key']}-{tag}", pure=False)
            in_flight[fut] = job
            finished.add(fut)

        for job in islice(jobs, max(1, sum(client.nthreads().values())) * JOBS_AHEAD):
            submit(job)
        for fut in finished:
            job = in_flight.pop(fut)
            try:
                res = fut.result()
            except Exception as e:  # KilledWorker, lost connection, ...
                res = {"key": job["key"], "status": "failed", "error": f"on the cluster: {_error_text(e)}"}
            fut.release()
            nxt = next(jobs, None)
            if nxt is not None:
                submit(nxt)
            yield res
    finally:
        if own:
            client.close()


# --- the sweep ---------------------------------------------------------------------------------


@dataclass
class SweepRun:
    """What one ``run_sweep`` did."""

    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False


Reporter = Callable[[str, Optional[TrialSpec], dict[str, Any]], None]


def run_sweep(
    sweep: Sweep,
    out: Union[str, Path],
    workers: Optional[int] = None,
    cluster: Any = None,
    resume: bool = False,
    trial_plots: bool = False,
    report: Optional[Reporter] = None,
    table_every_s: float = 1.0,
) -> SweepRun:
    """Run every trial of ``sweep`` not yet finished in ``out``; see the module docstring.

    ``report(event, spec, outcome)`` is called with ``"start"`` (spec None, outcome holds ``todo``
    and ``skipped``) and then ``"done"`` or ``"failed"`` per trial. Raises
    :class:`~cctestbed.sweep.store.StoreMismatch` or :class:`~cctestbed.sweep.store.StoreBusy` before running
    anything when the directory cannot be used.
    """
    from .store import Store

    store = Store(Path(out))
    store.check_compatible(sweep, resume)
    store.open(sweep)
    t_start = time.perf_counter()
    try:
        # The trials are streamed from the sweep, never listed: what this process holds does not
        # grow with the sweep (the store on disk is the record of every trial).
        total = skipped = 0
        for s in sweep.iter_specs():
            total += 1
            skipped += store.is_done(s.key)
        run = SweepRun(total=total, skipped=skipped)
        store.write_table(sweep)
        if report:
            report("start", None, {"todo": total - skipped, "skipped": skipped})
        running: dict[str, TrialSpec] = {}  # handed to the executor, not yet back

        def jobs() -> Iterator[dict[str, Any]]:
            for s in sweep.iter_specs():
                if not store.is_done(s.key):
                    running[s.key] = s
                    yield make_job(s, trial_plots, sweep.telemetry)

        if cluster is not None:
            outcomes = run_dask(jobs(), cluster)
        else:
            outcomes = run_local(jobs(), workers or os.cpu_count() or 1)
        last_table = time.perf_counter()
        table_s = 0.0
        try:
            for res in outcomes:
                spec = running.pop(res["key"])
                if res["status"] == "done":
                    store.commit(spec.key, res["files"])
                    run.done += 1
                else:
                    store.record_failure(
                        spec.key,
                        res["error"],
                        {"traceback": res.get("traceback"), "host": res.get("host"), "values": spec.values,
                         "seed": spec.seed},
                    )
                    run.failed += 1
                if report:
                    report(res["status"], spec, res)
                del res
                # a large table takes a while to write: at most a tenth of the time goes to it
                if time.perf_counter() - last_table >= max(table_every_s, 10 * table_s):
                    t0 = time.perf_counter()
                    store.write_table(sweep, incremental=True)
                    table_s = time.perf_counter() - t0
                    last_table = time.perf_counter()
        except KeyboardInterrupt:
            run.interrupted = True
        finally:
            close = getattr(outcomes, "close", None)
            if close:
                close()
        store.write_table(sweep)
        run.elapsed_s = time.perf_counter() - t_start
        return run
    finally:
        store.close()


# --- cost estimate -----------------------------------------------------------------------------


@dataclass
class Estimate:
    trials: int
    simulated_s: float
    cpu_s: float
    wall_s: float
    disk_bytes: float
    workers: int


@dataclass
class _Costed:
    """A spec with its trial at hand (what the estimate reads of it)."""

    spec: TrialSpec
    trial: Any

    @property
    def trial_dict(self) -> dict[str, Any]:
        return self.trial.model_dump(mode="json", exclude_none=True)


def _packets(spec: TrialSpec) -> float:
    """The packets the core will carry (the model the trial's size limit uses: TCP through the
    bottleneck, udp and ping at their own rates)."""
    from ..config import resources

    return float(resources(spec.trial).packets)


def _rows(spec: TrialSpec) -> float:
    from ..config import resources

    return float(resources(spec.trial).rows)


def estimate(sweep: Sweep, specs: list[TrialSpec], workers: int, probe_s: float = 4.0, scale: float = 1.0) -> Estimate:
    """Cost of running ``specs``, calibrated on a short probe of the sweep's heaviest trial.

    ``scale``: the trials ``specs`` stand for, per spec (a sample of a large sweep stands for
    all of it; seeds do not change a trial's cost).

    The core's time scales with the packets it carries (:func:`cctestbed.config.resources`:
    TCP's through the bottleneck, udp and ping at their rates); writing results scales with the
    telemetry rows (samples x flows). One probe of ``probe_s`` simulated seconds measures both
    rates on this machine.
    """
    from .. import _core
    from ..config import parse_trial, resources
    from .metrics import sweep_metrics
    from ..results import write_parquet
    from ..runner import BACKEND
    from ..schema import flows_frame, router_frame
    from ..summary import TrialInfo, summarize

    if not specs:
        return Estimate(0, 0.0, 0.0, 0.0, 0.0, workers)
    # a trial's cost does not depend on its seed: one trial per point (a large sweep rebuilds them)
    per_point: dict[int, Any] = {}
    for s in specs:
        if s.point not in per_point:
            per_point[s.point] = s.trial
    specs = [_Costed(s, per_point[s.point]) for s in specs]  # type: ignore[misc]
    heavy = max(specs, key=lambda s: (_packets(s) / max(s.trial.duration, 1), _rows(s)))
    doc = heavy.trial_dict
    dur = min(probe_s, heavy.trial.duration / 1e9)
    doc.update(duration=f"{dur}s", steady=None)
    doc.pop("steady")
    doc["link"] = {**doc["link"], "schedule": []}
    for g in doc["flows"]:
        g["start"], g["stagger"] = "0s", "0s"
    probe = parse_trial(doc, allow_large=True)
    core_s = math.inf
    for _ in range(3):  # the fastest of three: other load on the machine only slows a run down
        t0 = time.perf_counter()
        raw = _core.simulate(probe.to_core_json())
        core_s = min(core_s, time.perf_counter() - t0)
    full_flows, full_router = flows_frame(raw, probe, BACKEND), router_frame(raw, BACKEND)
    info = TrialInfo.from_trial(probe)

    def post(frac: float) -> tuple[float, float, int]:
        """(seconds, rows, bytes) of the work after the core on the first ``frac`` of the probe."""
        t_end = dur * frac
        flows = full_flows.filter(full_flows["time_s"] <= t_end + 1e-9)
        router = full_router.filter(full_router["time_s"] <= t_end + 1e-9)
        best = math.inf
        for _ in range(3):  # the first pass also pays one-time imports and warm-up
            t = time.perf_counter()
            sub = TrialInfo(**{**info.__dict__, "duration_s": t_end, "steady_s": (0.0, t_end)})
            summarize(flows, router, sub)
            sweep_metrics(flows, router, sub)
            with tempfile.TemporaryDirectory() as tmp:
                write_parquet(flows, Path(tmp) / "f.parquet")
                write_parquet(router, Path(tmp) / "r.parquet")
                size = sum(p.stat().st_size for p in Path(tmp).iterdir())
            best = min(best, time.perf_counter() - t)
        return best, float(len(flows)), size

    small_s, small_rows, _ = post(0.25)
    big_s, big_rows, size = post(1.0)
    per_packet = core_s / max(float(resources(probe).packets), 1.0)
    per_row = max(big_s - small_s, 0.0) / max(big_rows - small_rows, 1.0)
    fixed = max(small_s - per_row * small_rows, 0.0) + PER_TRIAL_S
    bytes_per_row = size / max(big_rows, 1.0)
    costs = [_packets(s) * per_packet + _rows(s) * per_row + fixed for s in specs]
    cpu = sum(costs) * scale
    n = round(len(specs) * scale)
    w = max(1, min(workers, n))
    # trials are handed out one at a time: the longest trial bounds the tail
    wall = max(cpu / w, max(costs)) + 2.0
    return Estimate(
        trials=n,
        simulated_s=sum(s.trial.duration / 1e9 for s in specs) * scale,
        cpu_s=cpu,
        wall_s=wall,
        disk_bytes=sum(_rows(s) * bytes_per_row for s in specs) * scale,
        workers=w,
    )
