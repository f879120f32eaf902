"""Cross-entropy straight from hidden states: the ``[M, V]`` logits never exist whole.

``chunked_linear_cross_entropy(h, W, b, targets)`` is ``sum_i CE(h_i @ W.T + b, t_i)`` over the
rows of ``h`` (rows with a target only; the caller selects them), computed ``chunk_size`` rows at
a time: the forward keeps one log-sum-exp per row, and the backward recomputes each chunk's
logits to form its gradient (softmax minus one-hot) and multiplies it into ``grad h`` and
``grad W`` at once. Peak memory beyond the inputs is one ``[chunk, V]`` fp32 block; the price is
a second ``h @ W.T`` in the backward (about a third more head FLOPs than the materialised path:
forward, recompute, two gradient products, against forward and two gradient products).

The numeric losses need only the ten digit columns -- ``h[rows] @ W[digit_ids].T``, an
``[N, H] x [H, 10]`` product -- which ordinary autograd handles (``DigitLoss.from_hidden``).

Shapes: ``K`` rows with a target, ``H`` hidden size, ``V`` vocabulary.
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK = 1024


def _chunk_logits(h_c: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the logits in the model's dtype, as ``lm_head(h)`` gives them, then fp32 -- what the
    # materialised path computes (logits = lm_head(h); the loss casts to float)
    z = h_c @ weight.t()
    if bias is not None:
        z = z + bias
    return z.float()


class _ChunkedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk_size: int):
        K = h.shape[0]
        lse = torch.empty(K, dtype=torch.float32, device=h.device)
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        for s in range(0, K, chunk_size):
            z = _chunk_logits(h[s : s + chunk_size], weight, bias)
            lse_c = torch.logsumexp(z, dim=-1)
            lse[s : s + chunk_size] = lse_c
            total += (lse_c - z.gather(1, targets[s : s + chunk_size].unsqueeze(1)).squeeze(1)).sum()
        ctx.save_for_backward(h, weight, bias if bias is not None else torch.empty(0), targets, lse)
        ctx.has_bias, ctx.chunk_size = bias is not None, chunk_size
        return total

    @staticmethod
    def backward(ctx, g):
        h, weight, bias, targets, lse = ctx.saved_tensors
        bias = bias if ctx.has_bias else None
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        gh = torch.empty_like(h) if need_h else None
        gw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b and bias is not None else None
        g = g.float()
        for s in range(0, h.shape[0], ctx.chunk_size):
            h_c = h[s : s + ctx.chunk_size]
            z = _chunk_logits(h_c, weight, bias)
            z.sub_(lse[s : s + ctx.chunk_size].unsqueeze(1)).exp_()  # softmax, in place
            z[torch.arange(z.shape[0], device=z.device), targets[s : s + ctx.chunk_size]] -= 1.0
            z.mul_(g)
            if gb is not None:
                gb += z.sum(0)
            # the logits' gradient in the model's dtype, as autograd hands it to lm_head's backward
            z = z.to(h.dtype)
            if gh is not None:
                gh[s : s + ctx.chunk_size] = z @ weight
            if gw is not None:
                gw += (z.t() @ h_c).float()
        return (gh, gw.to(weight.dtype) if gw is not None else None,
                gb.to(bias.dtype) if gb is not None else None, None, None)


def chunked_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                 targets: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Summed cross-entropy of ``h @ weight.T + bias`` (``[K, H]``, ``[V, H]``, ``[V]`` or None)
    against ``targets`` (``[K]`` long, every row a real target), never holding more than
    ``chunk_size`` rows of logits."""
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"expected h [K, H] and weight [V, H], got {tuple(h.shape)} and {tuple(weight.shape)}")
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if h.shape[0] == 0:
        return (h.sum() + weight.sum()) * 0.0
    return _ChunkedLinearCE.apply(h, weight, bias, targets, int(chunk_size))
