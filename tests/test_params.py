"""Notebook parameters (dpbook.params): every form papermill, the sweep CLI and a notebook's defaults give."""

from __future__ import annotations

import pytest

from dpbook.params import check_known, clean_float, listing, mapping, optional_listing, per_dataset


@pytest.mark.parametrize("value, expected", [
    (["mnist", "svhn"], ["mnist", "svhn"]), (("mnist",), ["mnist"]),
    ("['mnist', 'svhn']", ["mnist", "svhn"]), (" ['mnist'] ", ["mnist"]), ("('a', 'b')", ["a", "b"]),
    ("mnist,svhn", ["mnist", "svhn"]), ("mnist, svhn,", ["mnist", "svhn"]), ("mnist", ["mnist"]),
    (3.0, [3.0]), (None, [None]), ("", []), ([["mnist", 3.0, "dpdr"]], [["mnist", 3.0, "dpdr"]]),
])
def test_listing_accepts_every_form_of_a_list_parameter(value, expected):
    assert listing(value) == expected


def test_listing_casts_every_element():
    assert listing("1, 2.5", float) == [1.0, 2.5]
    assert listing([4, " 8 "], str) == ["4", "8"]
    assert listing("[0.1, 0.30000000000000004]", clean_float) == [0.1, 0.3]
    assert optional_listing(None, float) is None and optional_listing("IV", str) == ["IV"]


def test_per_dataset_values():
    assert mapping("{'mnist': 64}") == {"mnist": 64} and mapping("adam") == "adam"
    assert per_dataset(None, "mnist", 256) == 256
    assert per_dataset(128, "mnist", 256) == 128
    assert per_dataset({"mnist": 64}, "mnist", 256) == 64 and per_dataset({"mnist": 64}, "svhn", 256) == 256
    assert per_dataset(" {'svhn': 32} ", "svhn", 256) == 32


def test_unknown_names_are_refused_with_the_valid_ones():
    check_known("method(s)", ["dpsgd", "dpdr"], {"dpsgd": 1, "dpdr": 2})
    check_known("method(s)", [], {})
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['sgd'\]; valid: \['dpsgd', 'dpdr'\]"):
        check_known("method(s)", ["dpsgd", "sgd", "sgd"], ["dpsgd", "dpdr"])


def test_clean_floats_give_one_result_key_per_grid_value():
    assert clean_float(0.1 * 3) == 0.3 and clean_float("1e-3") == 0.001 and clean_float(2) == 2.0
    assert clean_float(1 / 3) == 0.333333 and isinstance(clean_float(1), float)
