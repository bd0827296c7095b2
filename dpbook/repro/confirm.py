"""A chapter's checks, stated in words: a claim the page makes about what it just computed is confirmed (printed
with a tick, or the notebook stops naming it), and a finding that may go either way is answered yes or no.

A printed "claim: True" is a test's output, not a sentence a reader reads; these are the page's form of it.

    >>> confirm("every norm is positive", all(n > 0 for n in (0.5, 2.0)))
    ✓ every norm is positive
    >>> answer("some norm is above 1", any(n > 1 for n in (0.5, 2.0)))
    some norm is above 1: yes
"""

from __future__ import annotations

__all__ = ["confirm", "answer"]


def confirm(claim: str, holds: object) -> None:
    """Print ``✓ claim`` when ``holds`` is true; otherwise raise an AssertionError naming the claim, so that the
    notebook stops where its text would say something false.

    >>> confirm("2 > 3", 2 > 3)
    Traceback (most recent call last):
    ...
    AssertionError: the page claims that 2 > 3, and it does not hold
    """
    if not holds:
        raise AssertionError(f"the page claims that {claim}, and it does not hold")
    print(f"✓ {claim}")


def answer(question: str, value: object) -> None:
    """Print ``question: yes`` or ``question: no``: a finding the page reports whichever way it goes."""
    print(f"{question}: {'yes' if value else 'no'}")
