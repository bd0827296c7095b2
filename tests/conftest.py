"""Test-session settings shared by every test file."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests use tiny models; with pytest-xdist's workers on a 2-core machine, intra-op threads only contend
    (a digits Trainer step was measured 15x slower with 2 threads per worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
