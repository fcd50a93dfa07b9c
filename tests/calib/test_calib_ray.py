"""--ray: a local Ray instance (2 CPUs) against the single-process engine."""

import os
import sys

import numpy as np
import pytest
from builders import branchy_concat_model

from qtquant.calib import CalibConfig, calibrate
from qtquant.calib.engine import run_chunk
from qtquant.calib.sources import SyntheticSource
from qtquant.base.errors import CalibrationDataError, Cancelled
from qtquant.model.graph import graph_from_model

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    # The workers import qtquant from where this process does (a worktree in development).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def graph():
    return graph_from_model(branchy_concat_model(shape=(1, 3, 8, 8)))


def _same(a: dict, b: dict):
    assert list(a) == list(b) and a
    for n in a:
        np.testing.assert_array_equal(a[n].hist, b[n].hist)  # bit for bit
        assert (a[n].min, a[n].max, a[n].count, a[n].samples) == (b[n].min, b[n].max, b[n].count, b[n].samples)


@pytest.mark.parametrize("observer", ["minmax", "percentile"])
def test_ray_equals_single_process(local_ray, graph, observer):
    cfg = CalibConfig(count=20, holdout=0, observer=observer)
    local = calibrate(graph, cfg)
    calls = []
    dist = calibrate(graph, CalibConfig(count=20, holdout=0, observer=observer, ray="auto", jobs=2),
                     progress=lambda d, t: calls.append((d, t)))
    _same(local.stats, dist.stats)
    assert dist.ranges == local.ranges  # MinMax exactly; percentile from identical histograms
    assert calls and calls[-1] == (20, 20) and all(d <= 20 for d, _ in calls)


class _DyingOnce(SyntheticSource):
    """Kills the worker process running its first chunk (once: a marker file remembers)."""

    def __init__(self, specs, n, seed, marker):
        super().__init__(specs, n, seed)
        self.marker = marker

    def feeds(self, refs):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            fd = None
        if fd is not None:
            os.close(fd)
            os._exit(1)  # the worker dies mid-chunk, as on a lost node
        yield from super().feeds(refs)


def test_killed_worker_does_not_corrupt_the_result(local_ray, graph, tmp_path, capfd):
    from qtquant.calib.rayrun import run_ray
    from qtquant.model.runtime import input_specs

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    specs = input_specs(graph)
    names = list(graph.observed_tensors)
    source = _DyingOnce(specs, 12, 0, str(tmp_path / "died"))
    plain = SyntheticSource(specs, 12, 0)
    want = run_chunk(graph.model, None, names, plain, plain.refs, stride=1)
    got = run_ray(graph, names, source, source.refs, "auto", 2)
    assert (tmp_path / "died").exists()  # a worker did die
    _same(want, got)
    # Ray restores a restarted actor's constructor arguments only when they are not in the object
    # store (ray#53727), and logs an error when they are: the model goes with each chunk call instead.
    assert "constructor arguments in the object store" not in capfd.readouterr().err


def test_unreadable_data_and_cancel(local_ray, graph, tmp_path):
    data = tmp_path / "d.npy"
    np.save(data, np.random.default_rng(0).normal(0, 1, (6, 3, 8, 8)).astype(np.float32))
    ok = calibrate(graph, CalibConfig(source=str(data), count=6, holdout=0, ray="auto", jobs=2))
    assert ok.batches == 6
    calls = []
    with pytest.raises(Cancelled):
        calibrate(graph, CalibConfig(count=64, holdout=0, ray="auto", jobs=2),
                  progress=lambda d, t: calls.append(d), cancel=lambda: bool(calls))
    # A worker that cannot read the data at the driver's path (no shared filesystem): a clear error.
    from qtquant.calib.rayrun import run_ray
    from qtquant.model.runtime import input_specs

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    src = _NotShared(input_specs(graph), 4, 0, os.getpid())
    with pytest.raises(CalibrationDataError, match="shared filesystem") as e:
        run_ray(graph, list(graph.observed_tensors), src, src.refs, "auto", 2)
    assert "\n" not in str(e.value) and "/data/not-here" in str(e.value)


class _NotShared(SyntheticSource):
    """Data the driver sees and the workers do not."""

    def __init__(self, specs, n, seed, driver):
        super().__init__(specs, n, seed)
        self.driver = driver

    def fingerprint(self):
        if os.getpid() != self.driver:
            raise CalibrationDataError("calibration data not found: /data/not-here")
        return super().fingerprint()


def test_a_live_cluster_address_passes_the_address_check(local_ray):
    from qtquant.calib.rayrun import unreachable

    address = ray.get_runtime_context().gcs_address
    assert unreachable(address) == ""
    assert unreachable("127.0.0.1:" + address.rsplit(":", 1)[1]) == ""  # Ray's own reading of a loopback one
