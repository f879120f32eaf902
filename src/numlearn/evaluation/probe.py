"""The checkpoint probe: what a model does at the digits of reference solutions, teacher forced, per problem.

For every digit target of every solution (GSM8K's and MATH's test solutions by default; ``numlearn.probe``
is the command), with the ten digit logits ``z``, ``p = softmax(z)``, the target ``y`` and its DEL place
weight ``w`` (``losses.number_spans``):

* ``digit_logit``: the mean raw digit logit ``mean_k z_k``; ``gap``: that minus the mean logit of every
  non-digit token at the same position (the code form sinks raw digit logits: docs/what_del_does.md);
* ``digit_mass``: ``q``, the digit tokens' share of the full softmax;
* ``entropy``: the digit softmax's entropy (nats); ``correct``: ``argmax z == y``; ``nll``: ``-log p_y``
  (digit-conditional), and both per place (units, tens, hundreds, thousands and up, tenths,
  hundredths, thousandths and beyond);
* ``lowers_<form>`` / ``lowers_weight_<form>``: whether one gradient step of each DEL form's term
  (``losses.mechanism.FORMS``) would lower the target's full-vocabulary probability -- the count, and
  the place weight there -- with ``losses.mechanism.target_push`` (the definitions
  ``experiments/del_mechanism.py`` uses: one implementation).

Each problem becomes one row of sums (``probe_rows``), so a summary is a ratio of sums over problems
and its interval a bootstrap over problems (``summarise``), and two models on the same solutions are
compared problem by problem (``compare``: model minus baseline, paired).
"""

from __future__ import annotations

import math

import torch

from numlearn.losses.mechanism import FORMS

PLACES = ("units", "tens", "hundreds", "thousands+", "tenths", "hundredths", "thousandths+")
# per-digit quantities summed per problem; the summary of each is sum / sum of its denominator
SUMS = ("correct", "nll", "entropy", "digit_logit", "gap", "digit_mass", "weight",
        *(f"lowers_{f}" for f in FORMS), *(f"lowers_weight_{f}" for f in FORMS))
DENOMINATOR = {**{k: "n_digits" for k in SUMS}, **{f"lowers_weight_{f}": "weight" for f in FORMS}}
# what a summary reports as a share (x 100 in tables) rather than a mean
SHARES = ("correct", *(f"lowers_{f}" for f in FORMS), *(f"lowers_weight_{f}" for f in FORMS))


def place_of(del_weight: torch.Tensor) -> torch.Tensor:
    """Index into ``PLACES`` of each digit from its DEL place weight: ``2r`` for the r-th integer place
    (units r = 1), ``1.02^-(k+1)`` for the k-th position after the point (k = 1: tenths)."""
    w = del_weight.float()
    r = torch.round(w / 2).long()
    k = torch.round(-torch.log(w.clamp_max(1.0)) / math.log(1.02)).long() - 2
    integer = w >= 1.5
    return torch.where(integer, (r - 1).clamp(0, 3), 4 + k.clamp(0, 2))


def position_stats(logits: torch.Tensor, labels: torch.Tensor, vocab) -> dict[str, torch.Tensor]:
    """Per digit target of a batch (``[B, T, V]`` logits, ``[B, T]`` unshifted labels): ``example``
    (the batch row), ``place`` and every quantity of ``SUMS`` (``[N]`` each, fp32; ``correct`` and
    ``lowers_*`` as 0/1). ``vocab``: a ``DigitVocab`` (single-digit tokens; ``digit_mass`` and ``gap``
    over the full vocabulary) or a ``NumberVocab`` (digit marginals of number tokens: ``digit_mass`` 1,
    the digit-conditional push, and ``gap`` against the marginals' own scale)."""
    from numlearn.losses import digit_view
    from numlearn.losses.mechanism import target_push

    with torch.no_grad():
        zd, dt = digit_view(logits, labels, vocab)
        zd = zd.float()
        y = dt.values.long()
        T = logits.shape[1]
        logp = torch.log_softmax(zd, -1)
        p = logp.exp()
        out = {"example": torch.div(dt.rows, T, rounding_mode="floor"), "place": place_of(dt.del_weight)}
        out["correct"] = (zd.argmax(-1) == y).float()
        out["nll"] = -logp.gather(1, y[:, None])[:, 0]
        out["entropy"] = -(p * logp).sum(-1)
        out["digit_logit"] = zd.mean(-1)
        if vocab.single_digit:  # each digit its own token: the gap to the other logits means something
            full = logits.reshape(-1, logits.shape[-1])[dt.rows].float()
            V = full.shape[-1]
            out["gap"] = out["digit_logit"] - (full.sum(-1) - zd.sum(-1)) / (V - 10)
            q = (torch.logsumexp(zd, -1) - torch.logsumexp(full, -1)).exp()
        else:
            out["gap"] = torch.zeros_like(out["digit_logit"])
            q = torch.ones_like(out["digit_logit"])
        out["digit_mass"] = q
        out["weight"] = dt.del_weight.float()
        for form in FORMS:
            low = (target_push(zd, y, form, q) < 0).float()
            out[f"lowers_{form}"] = low
            out[f"lowers_weight_{form}"] = low * out["weight"]
    return out


def example_rows(stats: dict[str, torch.Tensor], n_examples: int) -> list[dict]:
    """``position_stats`` of one batch summed per example: ``{"n_digits", "sums": {...}, "places":
    {place: [n, correct, nll]}}`` for each of the batch's ``n_examples`` rows (an example without digits
    gets zeros)."""
    ex = stats["example"].cpu()
    rows = []
    n = torch.bincount(ex, minlength=n_examples)
    sums = {k: torch.zeros(n_examples, dtype=torch.float64).index_add_(0, ex, stats[k].cpu().double()) for k in SUMS}
    pl = stats["place"].cpu()
    cell = ex * len(PLACES) + pl
    size = n_examples * len(PLACES)
    pn = torch.bincount(cell, minlength=size).view(n_examples, -1)
    pc = torch.zeros(size, dtype=torch.float64).index_add_(0, cell, stats["correct"].cpu().double()).view(n_examples, -1)
    pnll = torch.zeros(size, dtype=torch.float64).index_add_(0, cell, stats["nll"].cpu().double()).view(n_examples, -1)
    for i in range(n_examples):
        rows.append({"n_digits": int(n[i]), "sums": {k: float(sums[k][i]) for k in SUMS},
                     "places": {PLACES[j]: [int(pn[i, j]), float(pc[i, j]), float(pnll[i, j])]
                                for j in range(len(PLACES)) if pn[i, j] > 0}})
    return rows


def probe_rows(model, tokenizer, records: list[dict], vocab, max_length: int, batch_size: int = 8, progress=None):
    """Yield ``(index, row)`` for each of ``records`` (``{"instruction", "output"}``), teacher forced in
    batches (alpaca prompt, as training; the response's digits are the targets). ``progress(n)`` is called
    after each batch."""
    from numlearn.data.collate import PadCollator, tokenize_records

    feats, _ = tokenize_records(records, tokenizer, max_length)
    coll = PadCollator(tokenizer.pad_token_id)
    dev = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        for s in range(0, len(feats), batch_size):
            b = {k: v.to(dev) for k, v in coll(feats[s : s + batch_size]).items()}
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            for i, row in enumerate(example_rows(position_stats(logits, b["labels"], vocab), b["input_ids"].shape[0])):
                yield s + i, row
            if progress is not None:
                progress(b["input_ids"].shape[0])


def _matrix(rows: list[dict]) -> torch.Tensor:
    """``[n, 1 + len(SUMS)]`` float64: each problem's digit count, then its sums."""
    return torch.tensor([[r["n_digits"], *(r["sums"][k] for k in SUMS)] for r in rows], dtype=torch.float64)


def _ratios(m: torch.Tensor) -> torch.Tensor:
    """Ratios of column sums ``[..., 1 + K] -> [..., K]``: each quantity over its denominator (NaN when 0)."""
    den_col = torch.tensor([0 if DENOMINATOR[k] == "n_digits" else 1 + SUMS.index(DENOMINATOR[k]) for k in SUMS])
    return m[..., 1:] / m[..., den_col]


def _resample_weights(n: int, n_boot: int, seed: int) -> torch.Tensor:
    """``[n_boot, n]``: how often each problem is drawn in each bootstrap replicate (one generator, so a
    paired comparison resamples the same problems on both sides)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(n, (n_boot, n), generator=g)
    return torch.zeros(n_boot, n, dtype=torch.float64).scatter_add_(1, idx, torch.ones(n_boot, n, dtype=torch.float64))


def _ci(boot: torch.Tensor) -> list[list[float] | None]:
    """Per column of ``[n_boot, K]``: the 95 % percentile interval over the finite replicates."""
    out = []
    for col in boot.T:
        col = col[torch.isfinite(col)]
        out.append([float(torch.quantile(col, 0.025)), float(torch.quantile(col, 0.975))] if col.numel() else None)
    return out


def _place_matrix(rows: list[dict], place: str) -> torch.Tensor:
    """``[n, 3]`` float64: each problem's digits at ``place``, their correct count and summed NLL."""
    return torch.tensor([r["places"].get(place, [0, 0, 0]) for r in rows], dtype=torch.float64).reshape(-1, 3)


def _place_ratios(m: torch.Tensor) -> torch.Tensor:
    """``[..., 3] -> [..., 2]``: accuracy and NLL at a place, as ratios of sums (NaN without a digit there)."""
    return m[..., 1:] / m[..., :1]


def _places(rows: list[dict], w: torch.Tensor | None = None) -> dict:
    """Per place with digits: ``n_digits``, ``correct`` and ``nll`` (ratios of sums over the problems) and, with
    resample weights ``w`` (``[n_boot, n]``), their 95 % bootstrap intervals over problems (``ci``)."""
    out = {}
    for place in PLACES:
        m = _place_matrix(rows, place)
        n = int(m[:, 0].sum()) if len(rows) else 0
        if n:
            v = _place_ratios(m.sum(0))
            out[place] = {"n_digits": n, "correct": float(v[0]), "nll": float(v[1])}
            if w is not None:
                out[place]["ci"] = dict(zip(("correct", "nll"), _ci(_place_ratios(w @ m)), strict=True))
    return out


def _value(x: float) -> float | None:
    return None if x != x else x  # NaN: no digit (or no weight) to divide by


def summarise(rows: list[dict], n_boot: int = 2000, seed: int = 0) -> dict:
    """Each quantity of ``SUMS`` as a ratio of sums over the problems, with a 95 % bootstrap interval over
    problems, and the per-place accuracy and NLL with theirs."""
    m = _matrix(rows)
    value = _ratios(m.sum(0))
    w = _resample_weights(len(rows), n_boot, seed) if n_boot and rows else None
    cis = _ci(_ratios(w @ m)) if w is not None else [None] * len(SUMS)
    out = {"n_problems": len(rows), "n_digits": int(m[:, 0].sum()) if rows else 0, "places": _places(rows, w)}
    for j, k in enumerate(SUMS):
        out[k] = {"value": _value(float(value[j])), "ci": cis[j]}
    return out


def compare(rows: list[dict], base: list[dict], n_boot: int = 2000, seed: int = 0) -> dict:
    """Model minus baseline on the same problems (rows in the same order): each quantity's difference of
    ratios with a paired bootstrap interval over problems (one resampling of the problems for both), and
    the per-place differences with theirs."""
    if len(rows) != len(base):
        raise ValueError(f"compare: {len(rows)} problems against the baseline's {len(base)}: probe both on the same "
                         "solutions (the same datasets and n)")
    a, b = _matrix(rows), _matrix(base)
    value = _ratios(a.sum(0)) - _ratios(b.sum(0))
    if n_boot and rows:
        w = _resample_weights(len(rows), n_boot, seed)
        cis = _ci(_ratios(w @ a) - _ratios(w @ b))
    else:
        cis = [None] * len(SUMS)
    out = {"n_problems": len(rows)}
    for j, k in enumerate(SUMS):
        out[k] = {"value": _value(float(value[j])), "ci": cis[j]}
    pa, pb = _places(rows), _places(base)
    out["places"] = {}
    for p in (p for p in PLACES if p in pa and p in pb):  # paired: the same problem draws on both sides
        out["places"][p] = {q: pa[p][q] - pb[p][q] for q in ("correct", "nll")}
        if n_boot and rows:
            boot = _place_ratios(w @ _place_matrix(rows, p)) - _place_ratios(w @ _place_matrix(base, p))
            out["places"][p]["ci"] = dict(zip(("correct", "nll"), _ci(boot), strict=True))
    return out
