"""``--ray auto|ADDRESS``: calibration spread over the workers of a Ray cluster.

Each worker is a Ray actor holding one onnxruntime session of the augmented model
(:class:`~qtquant.calib.engine.ChunkRunner`).  The samples are cut into chunks (a few per worker,
so progress moves and a slow node does not hold the rest up); a worker reduces a chunk into the
same mergeable :class:`~qtquant.calib.stats.TensorStats` a local run makes and returns them, and
the driver merges the chunks in sample order once every chunk is in: histograms and MinMax equal a
local run's bit for bit, and nothing is half-merged.  (Bit for bit given the same onnxruntime thread
count: a worker runs one thread, like each ``--jobs N`` process; on yolov8n_320 a two-thread
session rounds a few activations differently, moving 7 of 98 tensors' min/max by 2.5e-7 relative.)

A chunk's result depends only on its samples, so a worker that dies is restarted by Ray and its
chunk run again (``max_restarts`` / ``max_task_retries``); when the retries run out the whole
calibration fails with one line.  Cancelling kills the workers.  The model reaches a worker as an
argument of each chunk call, not of the actor's constructor: Ray cannot restore an object-store
argument of a restarted actor's constructor (ray-project/ray#53727, and it logs an error saying
so), while a call's arguments stay alive for as long as the driver holds them.  A worker builds
its session on its first chunk and keeps it.

The workers read the calibration data themselves, from the same paths: the data must be on a
filesystem every node sees (NFS, a cluster volume).  Each worker checks first that it sees the
same files (names, sizes, modification times) as the driver, and says which node does not.  The
model travels as bytes through Ray's object store; qtquant itself must be installed on the nodes.
"""

from __future__ import annotations

import logging
import os
import socket

from ..base.errors import BadInputError, CalibrationDataError, Cancelled, QtQuantError, first_line
from .parallel import split_even
from .sources import data_digest
from .stats import BINS, TensorStats

__all__ = ["run_ray", "connect", "unreachable", "CHUNKS_PER_WORKER", "RETRIES"]

CHUNKS_PER_WORKER = 8
RETRIES = 2  # restarts of a dead worker, and re-runs of the chunk it held
_POLL_S = 0.1  # how often a cancel request is looked at while chunks run
PROBE_S = 10.0  # how long a cluster address may take to accept a connection
_SHARED_FS = "--ray needs the calibration data on a filesystem every Ray worker can read (a shared filesystem)"


def _ray():
    try:
        import ray
    except ImportError:
        raise BadInputError("--ray needs Ray on this machine and the cluster: pip install 'qtquant[ray]'") from None
    return ray


def connect(address: str) -> bool:
    """Connect to Ray; True when this call started it (the caller shuts it down again).

    ``auto``: the cluster this machine belongs to (``RAY_ADDRESS`` or a running ``ray start``),
    else a local Ray instance on this machine's CPUs.  Anything else is a cluster address.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    kw = dict(log_to_driver=False, include_dashboard=False, logging_level=logging.WARNING)
    quiet_auth_notice()
    if address == "auto":
        try:
            ray.init(address="auto", **kw)
        except (ConnectionError, RuntimeError, ValueError):
            try:
                ray.init(**kw)  # no cluster here: a local one
            except Exception as e:  # noqa: BLE001 - Ray raises several types when a local start fails
                raise BadInputError(f"cannot start a local Ray instance: {first_line(e, 200)}") from None
        except Exception as e:  # noqa: BLE001 - a cluster is here and refused this process (its token, say)
            raise BadInputError(f"cannot connect to the Ray cluster on this machine: {first_line(e, 200)}") from None
        return True
    problem = unreachable(address)
    if problem:
        raise BadInputError(f"cannot connect to the Ray cluster at {address}: {problem}")
    try:
        ray.init(address=address, **kw)
    except Exception as e:  # noqa: BLE001 - Ray raises several types for a bad or unreachable address
        raise BadInputError(f"cannot connect to the Ray cluster at {address}: {first_line(e, 200)}") from None
    return True


class _AuthNotice(logging.Filter):
    """Drops Ray's notice that it turned token authentication on for a local instance, the
    secure default it picks itself, printed at every run (its warning that authentication is
    off stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token authentication is enabled for this Ray cluster")


_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def quiet_auth_notice() -> None:
    log = logging.getLogger(_AUTH_LOGGER)
    if not any(isinstance(f, _AuthNotice) for f in log.filters):
        log.addFilter(_AuthNotice())


def unreachable(address: str, timeout: float = PROBE_S) -> str:
    """Why no Ray cluster can answer at ``address`` (``host:port`` or ``ray://host:port``), or ""
    when a gRPC server does (or the address is not of that form: Ray judges it then).

    Ray's own connect to an address where no cluster listens retries for many minutes (Ray
    2.60: 20 attempts, each waiting out GCS connect timeouts of 5 to 30 s) before it says so."""
    scheme, _, rest = address.rpartition("://")
    host, sep, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        return ""
    via = ""
    if not scheme and host in ("localhost", "127.0.0.1"):
        try:  # Ray connects to this machine's own address for a loopback cluster address
            mine = _ray().util.get_node_ip_address()
            host, via = mine, f" (Ray connects to this machine's address, {mine})"
        except Exception:  # noqa: BLE001 - then the loopback address itself
            pass
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            # Ray's GCS and its client server speak gRPC (HTTP/2), which answers a connection
            # preface with a SETTINGS frame; the dashboard (8265) answers in HTTP/1.
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return ""  # its gRPC speaks TLS first: a connection is all this can see
            conn.sendall(_H2_PREFACE)
            head = _read_some(conn, 9)
    except socket.timeout:
        return f"nothing answered within {timeout:g} s{via}; check the address{_WHERE}"
    except OSError as e:
        return f"nothing answers there ({e.strerror or e}){via}; check the address{_WHERE}"
    if head.startswith(b"HTTP/"):
        return (f"that is a web server (the Ray dashboard's port?), not the cluster's; give the head node's "
                f"address and port (6379 unless the cluster says otherwise){_WHERE}")
    if len(head) == 9 and head[3] == 4:  # a SETTINGS frame
        return ""
    return f"what answers there is not a Ray cluster (no gRPC server){via}; check the address{_WHERE}"


_WHERE = " (`ray status` on the head node prints it)"
# HTTP/2's client connection preface, then an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes((0, 0, 0, 4, 0, 0, 0, 0, 0))


def _read_some(conn, n: int) -> bytes:
    got = b""
    while len(got) < n:
        part = conn.recv(n - len(got))
        if not part:
            break
        got += part
    return got


class _Worker:
    """A Ray actor: one session, any number of chunks."""

    def __init__(self, base_dir, names, input_names, stride, bins, threads):
        self.args = (base_dir, names, input_names, stride, bins, threads)
        self.runner = None  # built on the first chunk, again after a restart

    def check(self, source, digest: str) -> tuple[str, str]:
        """(this node's name, "" or why it does not see the driver's calibration data)."""
        host = socket.gethostname()
        try:
            mine = data_digest(source)
        except (OSError, QtQuantError) as e:
            return host, f"cannot read the calibration data ({e})"
        return host, "" if mine == digest else (f"sees other calibration data at {source.root} "
                                                f"(file names, sizes or times differ)")

    def run(self, model_bytes, source, refs) -> dict[str, TensorStats]:
        if self.runner is None:
            import onnx

            from .runner import ChunkRunner

            base_dir, names, input_names, stride, bins, threads = self.args
            self.runner = ChunkRunner(onnx.ModelProto.FromString(model_bytes), base_dir, names, input_names,
                                      threads=threads, stride=stride, bins=bins)
        return self.runner.run(source, refs)


def _cause(ray, e) -> QtQuantError:
    """One-line error for what a Ray call raised."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, QtQuantError):
        return type(cause)(str(cause))  # a data or model error from the worker, as a local run says it
    if isinstance(e, ray.exceptions.RayActorError):
        return QtQuantError(f"a Ray calibration worker died and was restarted {RETRIES} times without "
                            f"finishing its samples; nothing was merged")
    text = str(cause if cause is not None else e).strip().splitlines()
    return QtQuantError(f"a Ray calibration worker failed: {(text[-1] if text else type(e).__name__)[:300]}")


def run_ray(graph, names, source, refs, address: str, jobs: int = 1, *, stride: int = 1, bins: int = BINS,
            progress=None, cancel=None) -> dict[str, TensorStats]:
    """Statistics of ``refs`` for ``names``, computed on Ray workers (``jobs`` of them; 1 = one
    per CPU of the cluster) and merged in sample order."""
    ray = _ray()
    started = connect(address)
    actors = []
    try:
        workers = jobs if jobs > 1 else max(1, int(ray.cluster_resources().get("CPU", 1)))
        workers = max(1, min(workers, len(refs)))
        chunks = [c for c in split_even(list(refs), min(len(refs), workers * CHUNKS_PER_WORKER)) if c]
        actor_cls = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(_Worker)
        model_ref = ray.put(graph.model_bytes())
        source_ref = ray.put(source)
        base_dir = str(graph.base_dir) if graph.base_dir else ""
        actors = [actor_cls.remote(base_dir, list(names), list(source.specs), stride, bins, 1)
                  for _ in range(workers)]
        digest = data_digest(source)
        try:
            for host, problem in ray.get([a.check.remote(source_ref, digest) for a in actors]):
                if problem:
                    raise CalibrationDataError(f"Ray worker on {host}: {problem}; {_SHARED_FS}")
        except ray.exceptions.RayError as e:
            raise _cause(ray, e) from None
        results: list = [None] * len(chunks)
        todo = list(range(len(chunks)))[::-1]
        inflight: dict = {}
        done, total = 0, len(refs)

        def submit(k: int) -> None:
            if todo:
                i = todo.pop()
                inflight[actors[k].run.remote(model_ref, source_ref, chunks[i])] = (i, k)

        for k in range(len(actors)):  # two chunks queued per worker: no idle gap between them
            submit(k)
            submit(k)
        while inflight:
            if cancel is not None and cancel():
                raise Cancelled("calibration cancelled")
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                i, k = inflight.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise _cause(ray, e) from None
                done += len(chunks[i])
                if progress is not None:
                    progress(done, total)
                submit(k)
        merged = {n: TensorStats(bins=bins) for n in names}
        for part in results:
            for n in names:
                merged[n] = merged[n].merge(part[n])
        return merged
    finally:
        if started:
            # The workers are this driver's: they end with it.  Killing them first, mid-chunk, had
            # each raylet log its task retry to the user's terminal (after "interrupted").
            ray.shutdown()
        else:
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001 - already gone
                    pass
