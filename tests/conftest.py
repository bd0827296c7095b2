"""Test-session settings shared by every test file."""

import os

import pytest
import torch


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts) starts one worker more than the cores this process may use: a fifth of the
    suite's time is spent waiting (kernels and subprocesses starting, submitit polling its jobs), which a third
    worker fills. Measured on 2 cores: 16 min 0 s with 2 workers, 12 min 38 s with 3. pytest-xdist's variable
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


#: The kernels and entry points the tests start run one intra-op thread too (the models are small): with torch's
#: default of one thread per core, a digits run under four busy loops on 2 cores took 20.1 s against 0.88 s with one
#: thread, as each kernel's threads wait on one another; the suite then depends on how busy the machine is.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests use tiny models; with pytest-xdist's workers on a 2-core machine, intra-op threads only contend
    (a digits Trainer step was measured 15x slower with 2 threads per worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
