"""docs/figures/del_gradient.png: at one digit position, the change of the target's log-probability
under one gradient step of each DEL form's term (numlearn.losses.mechanism.target_push), against the
target's digit-conditional probability p_y, for three uniform shifts of the ten digit logits. The
paper form's curve is the same for every shift (softmax-invariant); the code form's is not, and
goes below zero (the step lowers the target) where the raw digit logits are low.

    python experiments/del_gradient_figure.py [--out docs/figures/del_gradient.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from numlearn.losses.mechanism import target_push


def curves(shifts=(-8.0, 0.0, 8.0), n: int = 200):
    """Target logit a + c, the other nine c: p_y runs over (0, 1) as a does."""
    a = torch.linspace(-6, 9, n, dtype=torch.float64)
    out = {}
    y = torch.zeros(n, dtype=torch.long)
    for c in shifts:
        z = torch.full((n, 10), c, dtype=torch.float64)
        z[:, 0] += a
        p_y = torch.softmax(z, -1)[:, 0]
        for form in ("code", "paper"):
            out[(form, c)] = (p_y.numpy(), target_push(z, y, form).numpy())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("docs/figures/del_gradient.png"))
    a = ap.parse_args(argv)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4))
    axes = fig.subplots(1, 2, sharey=False)
    for ax, form in zip(axes, ("code", "paper")):
        for (f, c), (py, push) in curves().items():
            if f == form:
                ax.plot(py, push, label=f"digit logits shifted by {c:+g}")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("p(target digit | digit)")
        ax.set_title(f"DEL, {form} form")
    axes[0].set_ylabel("d log P(target) per unit step")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
