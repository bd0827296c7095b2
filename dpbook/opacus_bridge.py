r"""A dpbook method inside an Opacus training script.

Opacus's ``PrivacyEngine.make_private`` gives a script three things: per-sample gradients (its hooks fill
``p.grad_sample`` at each ``loss.backward()``), Poisson batches (its ``DPDataLoader``) and an accountant that records
each step's noise multiplier and sample rate. Its optimizer then clips every example to one fixed ``max_grad_norm``
and adds noise. :func:`with_method` keeps the first three and replaces the last: one line after ``make_private``,

.. code-block:: python

    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=sigma, max_grad_norm=1.0)
    optimizer = with_method(optimizer, make_method("dcsgd-e", sigma=sigma))

and each ``optimizer.step()`` is then the method's private step (:class:`dpbook.optim.DPOptimizer`'s, on the
gradients Opacus formed): its clipping or scaling of each example, its releases (DC-SGD-E's histogram beside the
gradient), its noise, its next threshold. Before the accountant's hook runs, the optimizer's ``noise_multiplier`` is
set to the step's :meth:`~dpbook.methods.base.Method.noise_multiplier` (the composition of its releases), so that
``engine.get_epsilon(delta)`` accounts for what the method released, as dpbook's ledger would.
``max_grad_norm`` is then unused. Opacus divides the noisy sum by its ``expected_batch_size``, ``int(qN)``, and the
method is bound with the same :math:`B`: the step equals dpbook's with ``expected_batch_size`` set to that number.

What cannot be exact, and is refused: a method that needs more than the per-sample gradients of the batch at the
current parameters. Opacus forms those once per ``backward``; DIFF2 (the same examples at the previous iterate) and
DP-PSASC* (at the past iterates of its inner momentum) need a second pass that only dpbook's engine makes, and
Algorithm 2 of DP-PSASC (a full batch with each example's index) needs the indices no Opacus batch carries. For them,
use :class:`dpbook.optim.DPOptimizer` on Opacus's ``DPDataLoader`` batches (``optimizer.step(x, y)``). Opacus's
``secure_mode`` noise is refused too: the method draws its noise from dpbook's seeded generator.
"""

from __future__ import annotations

__all__ = ["MethodOptimizer", "with_method"]

import torch
from opacus.optimizers import DPOptimizer as OpacusOptimizer
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed  # as Opacus's own step (1.5.3 on)

from dpbook.methods.base import Method, MicroBatch
from dpbook.noise import GaussianNoise
from dpbook.optim import check_fresh, release
from dpbook.per_sample import FormedView, check_finite, flat_norms


class MethodOptimizer(OpacusOptimizer):
    """Opacus's optimizer with a dpbook method's step in place of its flat clipping and noise (:func:`with_method`
    builds it from the optimizer ``make_private`` returned). ``info`` holds the last step's noise multiplier and
    the method's released diagnostics."""

    def __init__(self, optimizer, *, method: Method, noise_seed: int = 0, **opacus):
        super().__init__(optimizer, **opacus)
        if self.secure_mode:
            raise ValueError("with_method draws the method's noise from dpbook's seeded generator, not Opacus's "
                             "secure_mode; make the engine with secure_mode=False")
        check_fresh(method)
        if method.per_example_state:
            raise ValueError(f"{method.name!r} runs on the full batch with each example's index, which an Opacus "
                             "batch does not carry: use dpbook.optim.DPOptimizer (see dpbook.opacus_bridge)")
        self.method = method
        self.noise = GaussianNoise(noise_seed, device=self.params[0].device)
        self.info: dict = {}
        self._acc = None
        method.bind(self.params, expected_batch_size=self.expected_batch_size)

    def clip_and_accumulate(self) -> None:
        """The batch's per-sample gradients (Opacus's ``grad_sample``) into the method's accumulators, marked as
        processed as Opacus marks them (a second ``step`` needs a new ``backward``)."""
        for p in self.params:
            _check_processed_flag(p.grad_sample)
        grads = [g.to(p.dtype) for g, p in zip(self.grad_samples, self.params)]
        norms = flat_norms(grads)
        check_finite(grads, norms, [f"parameter {i} {tuple(p.shape)}" for i, p in enumerate(self.params)])
        if self._acc is None:  # several backward passes before one step (Opacus's virtual steps) add up
            self._acc = self.method.start(self.params)
        positions = torch.arange(len(norms))  # an Opacus batch carries no training-set indices (no per-example state)
        self.method.accumulate(self._acc, MicroBatch(FormedView(grads, norms, _other_iterates), positions))
        for p in self.params:
            _mark_as_processed(p.grad_sample)

    def add_noise(self) -> None:
        """The method's release as ``p.grad`` (Opacus then divides it by ``expected_batch_size``); the optimizer's
        ``noise_multiplier`` is the step's, for the engine's accountant."""
        noisy_sum, self.info = release(self.method, self._acc, self.noise)
        self.noise_multiplier, self._acc = self.info["noise_multiplier"], None
        for p, s in zip(self.params, noisy_sum):
            p.grad = s.view_as(p)
        self.method.advance()


def _other_iterates(params):
    raise ValueError("this method needs the batch's per-sample gradients at other parameter values (DIFF2's "
                     "previous iterate, DP-PSASC*'s inner momentum), which Opacus does not compute: use "
                     "dpbook.optim.DPOptimizer on the DPDataLoader's batches (see dpbook.opacus_bridge)")


def with_method(optimizer: OpacusOptimizer, method: Method, *, noise_seed: int = 0) -> MethodOptimizer:
    """The optimizer ``PrivacyEngine.make_private`` returned, its clipping and noise replaced by ``method``'s step
    (module docstring): the same torch optimizer, expected batch size, loss reduction and accountant hook.

    Needs Opacus's per-sample gradients: ``make_private`` with ``clipping="flat"`` (its default) and
    ``grad_sample_mode`` ``"hooks"`` (its default) or ``"functorch"``, not distributed.
    """
    if type(optimizer) is not OpacusOptimizer:
        raise ValueError("with_method takes the DPOptimizer of make_private(clipping='flat', grad_sample_mode="
                         f"'hooks'), which holds per-sample gradients; got {type(optimizer).__name__}")
    if optimizer.step_hook is None:
        raise ValueError("the optimizer has no accountant hook: pass the one PrivacyEngine.make_private returned")
    bridged = MethodOptimizer(
        optimizer.original_optimizer, method=method, noise_seed=noise_seed, noise_multiplier=optimizer.noise_multiplier,
        max_grad_norm=optimizer.max_grad_norm, expected_batch_size=optimizer.expected_batch_size,
        loss_reduction=optimizer.loss_reduction)
    bridged.attach_step_hook(optimizer.step_hook)
    return bridged
