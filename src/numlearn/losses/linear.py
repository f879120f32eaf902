"""Cross-entropy straight from hidden states: the ``[M, V]`` logits never exist whole.

``chunked_linear_cross_entropy(h, W, b, targets)`` is ``sum_i CE(h_i @ W.T + b, t_i)`` over the
rows of ``h`` (rows with a target only; the caller selects them), computed ``chunk_size`` rows at
a time. Because the loss is a sum, each chunk's gradient (softmax minus one-hot) is multiplied
into ``grad h`` and ``grad W`` in the forward, while its logits exist; the backward only scales
them by the upstream scalar (the approach of Liger-Kernel's fused linear cross-entropy). Peak
memory beyond the inputs and the gradients is one ``[chunk, V]`` fp32 block, and the head costs
the same three products as the materialised path. Under ``torch.no_grad`` no gradient is formed.

The numeric losses need only the ten digit columns -- ``h[rows] @ W[digit_ids].T``, an
``[N, H] x [H, 10]`` product -- which ordinary autograd handles (``DigitLoss.from_hidden``).

Logit post-processing (``LogitTransform``): some heads change the logits after the product --
Granite divides by ``logits_scaling``, Cohere multiplies by ``logit_scale``, Gemma-2/3 soft-cap them
(``cap * tanh(z / cap)``). The transform is applied to every chunk and its derivative enters the
chunk's gradient, so the loss is that of the model's real logits. A soft cap keeps a second
``[chunk, V]`` block (its derivative).

Autocast: under ``torch.autocast`` the head product runs in the autocast dtype (as ``lm_head``
would); everything after it in fp32; gradients come back in the inputs' dtypes.

Choosing ``chunk_size``: peak memory beyond the inputs is about ``chunk_size x V x 4`` bytes (twice
that with a soft cap): 0.6 GB at 1,024 x 151,665. ``"auto"`` sizes it from H and V (``auto_chunk_size``: a block
about the size of the hidden states). Rows are the batch's *target* positions, so a batch
with fewer target positions than ``chunk_size`` (2 x 512 with prompts masked) is one chunk and saves
little over materialised logits; 128-512 bounds memory at a small cost in time.

Shapes: ``K`` rows with a target, ``H`` hidden size, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_CHUNK = 1024


@dataclass(frozen=True)
class LogitTransform:
    """What a model's head does to ``h @ W.T + b`` before the loss: ``z * scale``, then, with
    ``softcap`` set, ``softcap * tanh(z / softcap)`` (Gemma-2/3's ``final_logit_softcapping``)."""

    scale: float = 1.0
    softcap: float | None = None

    @property
    def identity(self) -> bool:
        return self.scale == 1.0 and self.softcap is None

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """Differentiable form (the digit columns, checks)."""
        if self.scale != 1.0:
            z = z * self.scale
        if self.softcap is not None:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z


IDENTITY = LogitTransform()


def _autocast_dtype(device_type: str):
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def _vocab_blocks(n: int, V: int, H: int, itemsize: int) -> list[slice]:
    """The vocabulary blocks in which a low-precision head's products are formed: each block's transients (an
    ``[n, Vb]`` and a ``[Vb, H]`` low-precision product and the ``[Vb, H]`` fp32 copy added into grad W) stay under
    ~1/8 of the chunk's fp32 ``[n, V]`` block, so no ``[V, H]`` or whole-chunk low-precision copy ever exists."""
    per_row = n * itemsize + H * (itemsize + 4)
    step = min(V, max(64, (n * V * 4 // 8) // max(per_row, 1)))
    return [slice(v0, min(v0 + step, V)) for v0 in range(0, V, step)]


def _chunk_logits(h_c: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the logits in the model's (or autocast's) dtype, as ``lm_head(h)`` gives them, then fp32 --
    # what the materialised path computes (logits = lm_head(h); the loss casts to float). A low-precision
    # head forms them a vocabulary block at a time into the fp32 block (no whole low-precision copy).
    h_c = h_c.to(weight.dtype)
    if weight.dtype == torch.float32:
        z = h_c @ weight.t()
        return z + bias if bias is not None else z
    z = torch.empty(h_c.shape[0], weight.shape[0], dtype=torch.float32, device=h_c.device)
    for blk in _vocab_blocks(h_c.shape[0], weight.shape[0], weight.shape[1], weight.element_size()):
        zb = h_c @ weight[blk].t()
        if bias is not None:
            zb = zb + bias[blk].to(zb.dtype)
        z[:, blk] = zb
    return z


class _ChunkedLinearCE(torch.autograd.Function):
    """(summed CE over the rows ``idx`` of ``h``, fp32 ``[N, 10]`` logits of the rows ``rows`` at
    the columns ``cols``).

    CE's gradient does not wait for the backward: the loss is a sum, so its upstream gradient is a
    scalar ``g``, and each chunk's ``softmax - onehot`` is multiplied into ``grad h`` and ``grad W``
    while the chunk's logits exist (then scaled by ``g``). Fwd + bwd thus costs the three head
    products of the materialised path, never a recomputation. The digit columns' gradient (known
    only in the backward, ``[N, 10]``) is added into the same buffers -- indexing ``W[cols]`` under
    autograd would allocate a second ``[V, H]`` gradient.

    ``per_row=True`` returns the ``[K]`` per-row CE instead of the sum (``reduction="none"``): the
    upstream gradient is then a vector known only in the backward, so the forward forms no gradient
    and the backward recomputes each chunk's logits once (one more head product than the sum)."""

    @staticmethod
    def forward(ctx, h, weight, bias, idx, targets, rows, cols, chunk_size: int, grad_enabled: bool,
                transform: LogitTransform = IDENTITY, weights: torch.Tensor | None = None, per_row: bool = False,
                grad_in_weight_dtype: bool = False, fused_chain: bool = False):
        cdt = _autocast_dtype(h.device.type)
        ctx.grad_in_weight_dtype, ctx.fused_chain = grad_in_weight_dtype, fused_chain
        with torch.autocast(h.device.type, enabled=False):
            return _ChunkedLinearCE._forward(ctx, h, weight, bias, idx, targets, rows, cols, chunk_size,
                                             grad_enabled, transform, cdt, weights, per_row)

    @staticmethod
    def _forward(ctx, h, weight, bias, idx, targets, rows, cols, chunk_size, grad_enabled, transform, cdt,
                 weights=None, per_row=False):
        w_c = weight if cdt is None else weight.to(cdt)  # the head product in autocast's dtype
        b_c = bias if (cdt is None or bias is None) else bias.to(cdt)
        need = tuple(n and grad_enabled and not per_row for n in ctx.needs_input_grad[:3])
        gh, gw, gb = _grad_buffers(h, weight, bias, need, ctx.grad_in_weight_dtype)
        out = torch.zeros(idx.shape[0] if per_row else (), dtype=torch.float32, device=h.device)
        _ce_pass(h, (w_c, b_c), (idx, targets, weights), (gh, gw, gb), out,
                 _Pass(chunk_size, transform, ctx.fused_chain))
        # the digit columns' raw logits (h @ W.T + b); the caller applies the transform under autograd
        zd = _chunk_logits(h[rows], w_c[cols], b_c[cols] if b_c is not None else None)
        extra = (idx, targets, bias if bias is not None else torch.empty(0),
                 weights if weights is not None else torch.empty(0)) if per_row else ()
        ctx.save_for_backward(h, weight, rows, cols, *(x if x is not None else torch.empty(0) for x in (gh, gw, gb)),
                              *extra)
        ctx.has = (gh is not None, gw is not None, gb is not None)
        ctx.cdt, ctx.per_row, ctx.chunk_size, ctx.transform = cdt, per_row, chunk_size, transform
        ctx.has_bias, ctx.has_weights = bias is not None, weights is not None
        return out, zd

    @staticmethod
    def backward(ctx, g, g_zd):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):
            return _ChunkedLinearCE._backward(ctx, g, g_zd)

    @staticmethod
    def _backward(ctx, g, g_zd):
        h, weight, rows, cols, gh, gw, gb = ctx.saved_tensors[:7]
        w_c = weight[cols] if ctx.cdt is None else weight[cols].to(ctx.cdt)
        if ctx.per_row:  # the per-row upstream gradient is the rows' weight of a recomputed pass
            idx, targets, bias, weights = ctx.saved_tensors[7:]
            bias = bias if ctx.has_bias else None
            gh, gw, gb = _grad_buffers(h, weight, bias, ctx.needs_input_grad[:3], ctx.grad_in_weight_dtype)
            if g is not None:
                row_w = g.float() * (weights.float() if ctx.has_weights else 1.0)
                w_full = weight if ctx.cdt is None else weight.to(ctx.cdt)
                b_full = bias if (ctx.cdt is None or bias is None) else bias.to(ctx.cdt)
                _ce_pass(h, (w_full, b_full), (idx, targets, row_w), (gh, gw, gb),
                         torch.zeros((), dtype=torch.float32, device=h.device),
                         _Pass(ctx.chunk_size, ctx.transform, ctx.fused_chain))
        else:
            gh, gw, gb = (x if has else None for x, has in zip((gh, gw, gb), ctx.has))
            g = g.float() if g is not None else torch.zeros((), device=h.device)
            for x in (gh, gw, gb):
                if x is not None:
                    x.mul_(g.to(x.dtype))
        if g_zd is not None and rows.numel():
            g_zd = g_zd.float()
            if gb is not None:
                gb.index_add_(0, cols, g_zd.sum(0))
            _add_products(g_zd, h[rows], w_c, gh, gw, rows, cols)
        return (gh, gw.to(weight.dtype) if gw is not None else None,
                gb.to(weight.dtype) if gb is not None else None, None, None, None, None, None, None, None, None, None,
                None, None)


def _grad_buffers(h, weight, bias, need, in_weight_dtype: bool = False):
    """Zeroed gradient buffers of (h, W, b) where ``need`` says so, else None: grad h in h's dtype, grad W and b
    in fp32 (``in_weight_dtype``: grad W in the weight's own dtype, the buffer that is returned)."""
    need_h, need_w, need_b = need
    gh = torch.zeros_like(h) if need_h else None
    gw = torch.zeros(weight.shape, dtype=weight.dtype if in_weight_dtype else torch.float32,
                     device=weight.device) if need_w else None
    gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) \
        if need_b and bias is not None else None
    return gh, gw, gb


def _chain(z: torch.Tensor, t: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    """The chunk's elementwise chain written for a compiler: each row's CE (times ``w``) returned, and ``z``
    overwritten with its gradient for an upstream 1, ``(softmax(z) - onehot(t)) * w * scale``. Two reductions
    (max, sum of exp) and one elementwise pass that writes ``z`` in place: compiled (``torch.compile``; Inductor's
    C++ on CPU, Triton on GPU) it reads the block three times and writes it once, with no second block (the
    final ``copy_`` into the input is done in place), where the eager chain's nine in-place steps each read and
    write it. The same values as the eager chain to fp32 rounding (the sums' order differs)."""
    z_t = z.gather(1, t.unsqueeze(1)).squeeze(1)
    m = z.amax(dim=1, keepdim=True)
    tot = (z - m).exp().sum(dim=1, keepdim=True)
    ce = m.squeeze(1) + tot.squeeze(1).log() - z_t
    hit = torch.arange(z.shape[1], device=z.device).unsqueeze(0) == t.unsqueeze(1)
    z.copy_(((z - m).exp() / tot - hit.to(z.dtype)) * (w * scale).unsqueeze(1))
    return ce * w


def _chain_inplace(z: torch.Tensor, t: torch.Tensor, w: torch.Tensor | None, factor: float | torch.Tensor = 1.0,
                   grad: bool = True) -> torch.Tensor:
    """The chunk's chain, eager, in place (one block, no second): each row's CE (times ``w``; None: 1) returned,
    and with ``grad`` ``z`` overwritten with its gradient for an upstream 1, ``(softmax(z) - onehot(t)) * w *
    factor`` (``factor``: the logit scale, or a soft cap's ``[n, V]`` derivative). What ``_ce_pass`` runs without
    ``fused_chain``; ``_chain`` is the same contract written for a compiler."""
    # log-sum-exp and softmax in place: one [chunk, V] block (torch.logsumexp would add a second)
    z_t = z.gather(1, t.unsqueeze(1)).squeeze(1)
    m = z.max(dim=1, keepdim=True).values
    z.sub_(m).exp_()
    tot = z.sum(dim=1, keepdim=True)
    ce = m.squeeze(1) + tot.squeeze(1).log() - z_t
    ce = ce if w is None else ce * w
    if not grad:
        return ce
    z.div_(tot)  # softmax: the chunk's gradient for g = 1, once the target's one is removed
    z[torch.arange(z.shape[0], device=z.device), t] -= 1.0
    if w is not None:
        z.mul_(w.unsqueeze(1))  # each row's CE enters the sum with its weight
    if isinstance(factor, torch.Tensor) or factor != 1.0:
        z.mul_(factor)  # through the cap (and the scale) back to h @ W.T + b
    return ce


_COMPILED_CHAIN = None


def _fused_chain():
    """``_chain`` compiled once per process (a new chunk length recompiles once, then shapes are dynamic)."""
    global _COMPILED_CHAIN
    if _COMPILED_CHAIN is None:
        _COMPILED_CHAIN = torch.compile(_chain, fullgraph=True)
    return _COMPILED_CHAIN


@dataclass(frozen=True)
class _Pass:
    """How ``_ce_pass`` walks the rows: ``chunk_size`` at a time, ``transform`` on each chunk's logits, and the
    chain compiled (``fused_chain``) or eager."""

    chunk_size: int
    transform: LogitTransform
    fused_chain: bool = False


def _ce_pass(h, head, rows, grads, out, how: _Pass) -> None:
    """One pass over the target rows ``how.chunk_size`` at a time: each row's CE (times its weight) into ``out``
    (a scalar: summed; ``[K]``: per row), and, where buffers are given, its gradient for an upstream 1 into
    them while the chunk's logits exist. ``head``: (W, b) in the product's dtype; ``rows``: (``[K]`` rows of
    ``h``, their target ids, ``[K]`` weights or None); ``grads``: the (h, W, b) buffers or Nones.
    ``how.fused_chain``: the softmax-minus-one-hot chain as one compiled kernel (``_chain``) where no soft cap
    is applied."""
    (w_c, b_c), (idx, targets, weights), (gh, gw, gb) = head, rows, grads
    chunk_size, transform, fused_chain = how.chunk_size, how.transform, how.fused_chain
    any_grad = gh is not None or gw is not None or gb is not None
    for s in range(0, idx.shape[0], chunk_size):
        i_c, t_c = idx[s : s + chunk_size], targets[s : s + chunk_size]
        w_row = None if weights is None else weights[s : s + chunk_size].float()
        h_c = h[i_c]
        z = _chunk_logits(h_c, w_c, b_c)
        deriv = None
        if transform.scale != 1.0:
            z.mul_(transform.scale)
        if transform.softcap is not None:
            z.div_(transform.softcap).tanh_()
            deriv = (1.0 - z * z).mul_(transform.scale) if any_grad else None
            z.mul_(transform.softcap)
        if fused_chain and any_grad and deriv is None:
            ones = torch.ones(z.shape[0], device=z.device) if w_row is None else w_row
            ce_rows = _fused_chain()(z, t_c, ones, float(transform.scale))
        else:
            ce_rows = _chain_inplace(z, t_c, w_row, deriv if deriv is not None else float(transform.scale), any_grad)
            del deriv
        if out.dim():
            out[s : s + chunk_size] = ce_rows
        else:
            out += ce_rows.sum()
        if any_grad:
            if gb is not None:
                gb += z.sum(0)
            _add_products(z, h_c, w_c, gh, gw, i_c, None)
        del z  # before the next chunk's block is allocated: one block alive, not two


def _add_products(gz, h_rows, w_cols, gh, gw, rows, cols) -> None:
    """grad h[rows] += gz @ W[cols]; grad W[cols] += gz.T @ h[rows] (cols None: all of W). The
    logits' gradient is taken in the head product's dtype (the model's, or autocast's), as autograd
    hands it to lm_head's backward. A low-precision head over the whole vocabulary (cols None) does both a
    vocabulary block at a time: grad h's partial products summed in fp32, grad W's rows added in place."""
    h_rows = h_rows.to(w_cols.dtype)
    if cols is None and w_cols.dtype != torch.float32:
        acc_h = torch.zeros(gz.shape[0], w_cols.shape[1], dtype=torch.float32, device=gz.device) \
            if gh is not None else None
        for blk in _vocab_blocks(gz.shape[0], w_cols.shape[0], w_cols.shape[1], w_cols.element_size()):
            gzb = gz[:, blk].to(w_cols.dtype)
            if acc_h is not None:
                acc_h += gzb @ w_cols[blk]
            if gw is not None:
                if gw.dtype == gzb.dtype:
                    gw[blk].addmm_(gzb.t(), h_rows)
                else:
                    gw[blk] += gzb.t() @ h_rows
            del gzb
        if acc_h is not None:
            gh.index_add_(0, rows, acc_h.to(gh.dtype))
        return
    gz = gz.to(w_cols.dtype)
    if gh is not None:
        gh.index_add_(0, rows, (gz @ w_cols).to(gh.dtype))
    if gw is not None:
        if cols is None and gz.dtype == gw.dtype:
            gw.addmm_(gz.t(), h_rows)  # in place: no second [V, H] block
        elif cols is None:
            gw += (gz.t() @ h_rows).to(gw.dtype)
        else:
            gw.index_add_(0, cols, (gz.t() @ h_rows).to(gw.dtype))


def auto_chunk_size(rows: int, hidden: int, vocab: int) -> int:
    """``chunk_size="auto"``: the power of two nearest above ``rows / ceil(V / H)``, so that a chunk's
    ``[chunk, V]`` block holds about as many elements as the ``[rows, H]`` hidden states (Liger-Kernel's rule):
    the loss stage's transient then scales with the activations, not the vocabulary. Qwen2.5-1.5B at 4 x 1,500
    target rows: ceil(151,665 / 1,536) = 99, 6,000 / 99 -> 61 -> 64 rows (a 39 MB fp32 block)."""
    per = -(-int(vocab) // max(int(hidden), 1))
    need = max(1, -(-int(rows) // per))
    return 1 << (need - 1).bit_length()


@dataclass(frozen=True)
class LinearOptions:
    """How ``linear_ce_and_digit_logits`` runs: ``chunk_size`` target rows per chunk (or ``"auto"``:
    ``auto_chunk_size``); ``transform`` on the logits (None: identity); ``per_row``: the ``[K]`` weighted CE of
    each row instead of the sum (its backward recomputes the chunks); ``grad_in_weight_dtype``: accumulate grad W
    over the chunks in the weight's dtype (for a bf16 head: no fp32 ``[V, H]`` buffer, at bf16 rounding per chunk,
    as Liger-Kernel does) instead of fp32 (the default); ``fused_chain``: each chunk's softmax-minus-one-hot chain
    as one compiled kernel (``_chain``, ``torch.compile``) instead of nine eager in-place steps."""

    chunk_size: int | str = DEFAULT_CHUNK
    transform: LogitTransform | None = None
    per_row: bool = False
    grad_in_weight_dtype: bool = False
    fused_chain: bool = False


@dataclass(frozen=True, eq=False)
class LinearHead:
    """The model's output layer as ``from_hidden`` computes through it, and how it runs (one argument, so the
    fused call has the logits call's shape: ``loss_fn.from_hidden(hidden, head, labels, step=...)``).

    weight: ``[V, H]`` (tied embeddings: the embedding matrix); bias: ``[V]`` or None; transform: what the
        head does after the product (``LogitTransform``; None: the logits are ``hidden @ W.T + b``).
        ``numlearn.integrations.hf.linear_head(model)`` reads all three off a Hugging Face model.
    chunk_size: target rows per chunk, or ``"auto"`` (``auto_chunk_size``: a block about the hidden states' size).
    grad_accumulation: ``"float32"`` (default) sums grad W over the chunks in an fp32 ``[V, H]`` buffer;
        ``"weight"`` sums it in the weight's own dtype (for a bf16 head: no extra ``[V, H]`` buffer, the
        gradient rounded to bf16 once per chunk, as Liger-Kernel's fused loss does).
    fused_chain: each chunk's softmax-minus-one-hot chain as one compiled kernel (``torch.compile``: C++ on CPU,
        Triton on GPU; compiled once per process) instead of nine eager in-place passes over the chunk's block;
        the same values to fp32 rounding. Not under a soft cap (Gemma-2/3), which stays eager.

    A plain weight tensor in ``head``'s place is ``LinearHead(weight)``."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    transform: LogitTransform | None = None
    chunk_size: int | str = DEFAULT_CHUNK
    grad_accumulation: str = "float32"
    fused_chain: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.weight, torch.Tensor) or self.weight.dim() != 2:
            raise TypeError(f"LinearHead.weight must be the [V, H] output weight, got {_describe(self.weight)}")
        if self.grad_accumulation not in ("float32", "weight"):
            raise ValueError(f"grad_accumulation must be 'float32' or 'weight', got {self.grad_accumulation!r}")

    def options(self, per_row: bool = False) -> LinearOptions:
        """The kernel's ``LinearOptions`` for this head (``per_row``: the ``[K]`` rows' CE, not their sum)."""
        return LinearOptions(self.chunk_size, self.transform, per_row, self.grad_accumulation == "weight",
                             self.fused_chain)


def _describe(x) -> str:
    return f"a tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def linear_ce_and_digit_logits(h, weight, bias, idx, targets, weights: torch.Tensor | None = None,
                               digits: tuple[torch.Tensor, torch.Tensor] | None = None,
                               options: LinearOptions = LinearOptions()):
    """(summed CE of ``transform(h[idx] @ W.T + b)`` against ``targets``, fp32 ``[N, 10]`` logits
    ``transform(h[rows] @ W[cols].T + b[cols])``). ``h``: ``[M, H]``; ``idx``: ``[K]`` rows with a
    target; ``weights``: ``[K]`` per-row weights of the CE sum (None: 1); ``digits``: (``rows``, ``[N]``
    digit-target rows; ``cols``, the ten digit ids), None for none (``[0, 10]`` logits); ``options``:
    ``LinearOptions`` (chunking, transform, per-row CE, grad W's dtype, the compiled chain)."""
    if digits is None:
        digits = (torch.zeros(0, dtype=torch.long, device=h.device),) * 2
    rows, cols = digits
    chunk_size, transform = options.chunk_size, options.transform
    transform = transform or IDENTITY
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"expected h [M, H] and weight [V, H], got {tuple(h.shape)} and {tuple(weight.shape)}")
    if chunk_size == "auto":
        chunk_size = auto_chunk_size(idx.shape[0], weight.shape[1], weight.shape[0])
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1 or 'auto', got {chunk_size!r}")
    ce_sum, zd = _ChunkedLinearCE.apply(h, weight, bias, idx, targets, rows, cols, int(chunk_size),
                                        torch.is_grad_enabled(), transform, weights, bool(options.per_row),
                                        bool(options.grad_in_weight_dtype), bool(options.fused_chain))
    return ce_sum, (zd if transform.identity else transform(zd))


def chunked_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                                 targets: torch.Tensor, chunk_size: int = DEFAULT_CHUNK,
                                 transform: LogitTransform | None = None) -> torch.Tensor:
    """Summed cross-entropy of ``h @ weight.T + bias`` (``[K, H]``, ``[V, H]``, ``[V]`` or None)
    against ``targets`` (``[K]`` long, every row a real target), never holding more than
    ``chunk_size`` rows of logits."""
    idx = torch.arange(h.shape[0], device=h.device)
    return linear_ce_and_digit_logits(h, weight, bias, idx, targets,
                                      options=LinearOptions(chunk_size, transform))[0]
