"""Pretrained files from the Hugging Face hub, offline: ``transformers`` imported only where used, and a clear error
(:class:`PretrainedNotFoundError`, saying how to get the files) when weights or a tokenizer are not on disk.

    >>> print(pretrained_hint("tokenizer", "bert-base-uncased", OSError("not cached")).splitlines()[0])
    could not load the tokenizer 'bert-base-uncased' (transformers said: not cached).
"""

from __future__ import annotations

__all__ = ["PretrainedNotFoundError", "transformers_module", "pretrained_hint"]

_INSTALL_HINT = 'the text models need Hugging Face transformers: pip install "dpbook[text]"'


class PretrainedNotFoundError(FileNotFoundError):
    """Pretrained weights or a tokenizer are neither in the Hugging Face cache nor downloadable."""


def transformers_module():
    """The ``transformers`` module, or an ImportError saying how to install it."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return transformers


def pretrained_hint(what: str, name: str, cause: Exception) -> str:
    """What to do when the ``what`` (model, tokenizer) ``name`` is not on disk: the message of
    :class:`PretrainedNotFoundError`."""
    return (
        f"could not load the {what} {name!r} (transformers said: {str(cause).splitlines()[0]}).\n"
        f"It must be in the Hugging Face cache or a local folder. Either\n"
        f"  - run it once on a machine with internet access (e.g. Colab); the files are cached under "
        f"~/.cache/huggingface (or $HF_HOME), or\n"
        f"  - on such a machine, call .save_pretrained(folder) on it, copy the folder here and pass its path "
        f"instead of {name!r}.\n"
        f"Set HF_HUB_OFFLINE=1 to fail at once instead of retrying the network."
    )
