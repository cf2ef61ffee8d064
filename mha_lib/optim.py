"""Adam in a few lines: the optimiser that notebook 04's training cell and notebook 06's
trainings use.

Why not `torch.optim.Adam`? Its constructor imports torch's compiler stack (torch._dynamo, and
with it sympy and, where installed, triton): about 150 MB that stay in the kernel for the rest of
the session, on a Binder machine that has 2 GB for all of a learner's kernels. This class does
the same arithmetic as `torch.optim.Adam`'s loop over parameters on the CPU, in the same order
(tests/test_optim.py checks the parameters agree float for float after many steps), and imports
nothing but torch.

One step, per parameter p with gradient g, at step t (beta1, beta2, eps as in Kingma & Ba, 2015):
    p <- p * (1 - lr * weight_decay)                  (decoupled weight decay, as AdamW)
    m <- beta1 m + (1 - beta1) g                      (mean of the gradients)
    v <- beta2 v + (1 - beta2) g²                     (mean of their squares)
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["Adam"]


class Adam:
    """Adam (with decoupled weight decay when weight_decay > 0, i.e. AdamW).

    params: the tensors to train (e.g. `model.parameters()`); `zero_grad()` then `step()`, as
    with torch.optim. A parameter whose .grad is None is skipped, and its step count stays.
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("params is empty (or nothing in it requires grad); nothing to train")
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a number >= 0; got {value!r}")
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1); got {betas!r}")
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.steps = [0] * len(self.params)  # per parameter, as torch.optim counts them
        self.m = [torch.zeros_like(p) for p in self.params]  # first moments, p's shape
        self.v = [torch.zeros_like(p) for p in self.params]  # second moments, p's shape

    def zero_grad(self) -> None:
        """Drop every gradient (set it to None, as torch.optim does by default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step for every parameter that has a gradient."""
        beta1, beta2 = self.betas
        for i, (p, m, v) in enumerate(zip(self.params, self.m, self.v)):
            if p.grad is None:
                continue
            g = p.grad
            self.steps[i] += 1
            t = float(self.steps[i])
            if self.weight_decay != 0:
                p.mul_(1 - self.lr * self.weight_decay)
            m.lerp_(g, 1 - beta1)  # m + (1 - beta1)(g - m)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / (1 - beta2**t) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denom, value=-(self.lr / (1 - beta1**t)))
