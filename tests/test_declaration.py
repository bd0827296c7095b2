"""A method is one module: what is intrinsic to it is declared next to its class and read from there; what the book
does with it (colour, place in the book's lists, benchmark grids) is one row of the book's cast (dpbook.repro.cast).

A toy method written into one temporary module, and nothing else edited, must reach the registry, the audit and the
engine; with its row added to the cast, both benchmarks' grids, plotting and the bench. A class that declares
nothing is refused when it registers, and every registered method has its row in the cast or is left out, with why."""

import json
import subprocess
import sys

import pytest

from dpbook.methods import METHODS, register
from dpbook.methods.declaration import Declaration
from dpbook.repro import cast

TOY = '''
"""A toy method: clipping at C, every contribution halved (sensitivity C / 2)."""

from dpbook.methods.base import ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.per_sample import clip_factors


@register("toy")
class Toy(ScaledSum):
    """Half of DP-SGD's contribution."""

    declaration = Declaration(label="Toy", audit=Scenario(dict(C=1.0, sigma=1.0), "stateless"), run={"C": 1.0})

    def __init__(self, *, C: float, sigma: float):
        super().__init__()
        self.C, self.sigma = C, sigma

    def weights(self, norms):
        return 0.5 * clip_factors(norms, self.C)

    def sensitivity(self):
        return 0.5 * self.C
'''

PROBE = '''
import importlib, json, sys
import torch
import dpbook.methods
sys.path.insert(0, sys.argv[1])
importlib.import_module("toy_method")   # the one new module: it registers itself

from dpbook.audit import audit
from dpbook.audit.scenarios import SCENARIOS
from dpbook.repro import cast
from dpbook.repro.plotting import method_colour

result = audit("toy", trials=400)
try:
    method_colour("toy")
    without_row = None
except KeyError as err:
    without_row = str(err)
# its row in the book's cast (a contributor adds it to CAST in dpbook/repro/cast.py)
cast.CAST["toy"] = cast.Role("#123456", {cast.DIGITS: [{"C": 0.5}, {"C": 1.0}], cast.MNIST5K: [{"C": 1.0}]})
from dpbook.repro import bench, digits_benchmark, mnist5k_benchmark

setting = bench.SETTINGS["mnist_cnn"]
x, y = bench.batch(setting, 8, torch.device("cpu"))
bench.make_step("dpbook book-keeping", setting, x, y, torch.device("cpu"), method="toy")()
runs = digits_benchmark.BENCHMARK.planned_runs("toy", 4.0, "none")
print(json.dumps({
    "registered": "toy" in dpbook.methods.METHODS, "last": cast.in_book_order()[-1], "without_row": without_row,
    "scenario": SCENARIOS["toy"].state, "audit_sensitivity": result.sensitivity, "flagged": result.flagged,
    "digits": digits_benchmark.GRIDS["toy"], "mnist5k": mnist5k_benchmark.GRIDS["toy"],
    "planned": [r.hyperparameters for r in runs][:2], "colour": method_colour("toy"),
    "bench": list(bench.BENCH_METHODS),
}))
'''


@pytest.mark.slow
def test_a_toy_method_in_one_module_reaches_every_reader(tmp_path):
    module = tmp_path / "toy_method.py"
    module.write_text(TOY)
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["registered"] and seen["last"] == "toy"
    assert "dpbook.repro.cast.CAST" in seen["without_row"]  # the library had it; the book's figures asked for its row
    assert seen["scenario"] == "stateless"
    assert seen["audit_sensitivity"] == 0.5 and not seen["flagged"]   # the audit read its declared release
    assert seen["digits"] == [{"C": 0.5}, {"C": 1.0}] and seen["mnist5k"] == [{"C": 1.0}]
    assert seen["planned"][0]["C"] in (0.5, 1.0)
    assert seen["colour"] == "#123456"
    assert seen["bench"][-1] == "toy"


def test_every_registered_method_declares_itself():
    for name, cls in METHODS.items():
        declaration = cls.__dict__["declaration"]  # its own, not inherited from the class it extends
        assert isinstance(declaration, Declaration), name
        cls(**declaration.example)                  # the example builds the method


def test_every_registered_method_has_its_row_in_the_cast_or_is_left_out():
    assert set(cast.CAST) | set(cast.LEFT_OUT) == set(METHODS) and not set(cast.CAST) & set(cast.LEFT_OUT)
    assert all(cast.LEFT_OUT.values())  # each with why


def test_a_class_without_its_own_declaration_is_refused():
    class Inherits(METHODS["dpsgd"]):
        """Declares nothing: DP-SGD's declaration is inherited, not its own."""

    with pytest.raises(TypeError, match="has no declaration of its own"):
        register("inherits")(Inherits)
    assert "inherits" not in METHODS


@pytest.mark.parametrize("colour, grids, message", [
    ("#000000", {"digitz": [{}]}, "benchmark"),
    ("#000000", {cast.DIGITS: []}, "is empty"),
    ("blue", {}, "#rrggbb"),
])
def test_a_bad_row_of_the_cast_is_refused(colour, grids, message):
    with pytest.raises(ValueError, match=message):
        cast.Role(colour, grids)


def test_the_book_order_starts_with_dp_sgd_and_each_benchmark_has_its_grids():
    assert cast.in_book_order()[0] == "dpsgd"
    assert {name for name, role in cast.CAST.items() if cast.DIGITS in role.grids} == {
        name for name, role in cast.CAST.items() if cast.MNIST5K in role.grids}
