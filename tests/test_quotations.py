"""Every quotation the book credits to one of its papers is in that paper's text (tools/quotations.py): the chapters,
the Readings, the docstrings and the comments; and the check catches a quotation that is reworded."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import quotations  # noqa: E402

INDEX = quotations.load()


def test_every_quotation_credited_to_a_paper_is_verbatim():
    missing = [f"{q.where}: “{q.text}”" for q in quotations.not_found(INDEX)]
    assert not missing, ("quotations not in the paper's text: quote it verbatim, or reword it without quotation "
                         "marks (python tools/quotations.py check):\n" + "\n".join(missing))


def test_the_check_catches_a_reworded_quotation():
    page = ('Sec. VI-B: "The method of Du et al. can achieve the best performance under most settings". '
            'Sec. VI-B: "The method of Du et al. can achieve the best accuracy under most settings". '
            'The abstract promises a "9 times acceleration on hyperparameter tuning". '
            'Its abstract promises "up to 9 times acceleration on hyperparameter tuning".')
    found = {q.text: quotations.verbatim(q.text, INDEX) for q in quotations.quotations(page)}
    assert found == {"The method of Du et al. can achieve the best performance under most settings": True,
                     "The method of Du et al. can achieve the best accuracy under most settings": False,
                     "9 times acceleration on hyperparameter tuning": True,
                     "up to 9 times acceleration on hyperparameter tuning": True}


def test_maths_ellipses_and_insertions_split_a_quotation_into_parts_found_in_one_paper():
    assert quotations.verbatim("noises to the difference of consecutive sanitize[d] gradients on the same batch",
                               INDEX)
    assert not quotations.verbatim("noises to the difference of consecutive sanitized gradients on the same batch",
                                   INDEX)
    assert quotations.verbatim("After finding the proper $s$, we fix $s$ and implement the momentum version", INDEX)
    assert quotations.verbatim("with LT, … DC-SGD-P achieves comparable or superior performance", INDEX)
    assert quotations.verbatim("Chen Gong", INDEX)  # the DC-SGD paper's summary card, indexed with the papers
    assert quotations.verbatim("$\\sigma_H$", INDEX) is None  # nothing long enough to check


def test_only_a_quotation_the_sentence_credits_to_a_paper_is_checked():
    page = ('A cell without results says "not run yet reads here". '
            'App. G says "not run yet reads here". Readings row [DPDR-25] "a made-up phrase of four". '
            'As {cite:t}`andrew2021adaptive` put it, "a paper the index lacks". '
            'As {cite:t}`liu2024dpdr` put it, "a phrase of DPDR".')
    assert [q.text for q in quotations.quotations(page)] == ["not run yet reads here", "a made-up phrase of four",
                                                             "a phrase of DPDR"]


def test_every_quotation_listed_as_not_in_the_text_is_still_quoted():
    quoted = {q.text for where, prose in quotations._sources(ROOT) for q in quotations.quotations(prose, where)}
    assert set(quotations.NOT_IN_THE_TEXT) <= quoted, set(quotations.NOT_IN_THE_TEXT) - quoted
