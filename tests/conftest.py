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


#: The files whose tests take tens of seconds each (notebook executions, sweeps through the SLURM stand-in, the
#: dry runs, the documents' commands, the Colab stand-in).
SLOW_FILES = ("test_notebooks.py", "test_dispatch.py", "test_dry_run.py", "test_documented_commands.py",
              "test_colab.py")


def pytest_collection_modifyitems(items):
    """The slow files' tests first, each file's own order kept: pytest-xdist hands tests out in this order, and a
    long test left for the end keeps one worker busy while the other has nothing left to do."""
    items.sort(key=lambda item: item.path.name not in SLOW_FILES)
