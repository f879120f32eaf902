"""The DEL term's gradient at one digit position, in closed form (numlearn.losses.mechanism), checked
by hand and against autograd of the loss itself; where each form lowers the target's probability."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from numlearn.losses import DigitVocab, build_loss
from numlearn.losses.mechanism import del_digit_gradient, target_push
from numlearn.losses.spans import DigitTargets

REPO = Path(__file__).resolve().parents[1]


def _autograd(z: torch.Tensor, y: torch.Tensor, form: str) -> torch.Tensor:
    """d(term)/dz of DELLoss.digit_term itself, with every place weight 1."""
    loss = build_loss("del", DigitVocab(digit_ids=tuple(range(10)), dot_id=None), alpha=1.0, form=form,
                      place_weights="none")
    z = z.clone().requires_grad_(True)
    dt = DigitTargets(rows=torch.arange(len(y)), values=y, del_weight=torch.ones(len(y)),
                      int_place=torch.ones(len(y)))
    loss.digit_term(z, dt).sum().backward()
    return z.grad


def test_uniform_logits_by_hand():
    """z = 0: p = 0.1, sigmoid = 0.5, every BCE log 2 (so b_y - B = 0). Code: g_y = 0.1 (0.5 - 1) / 10
    = -0.005 and g_k = 0.1 * 0.5 / 10 = +0.005; paper: g_y = 0.1 - 1 - 0.01 * 0.9 = -0.909 and
    g_k = 0.1 + 0.01 * 0.1 = 0.101."""
    z, y = torch.zeros(1, 10), torch.tensor([0])
    code, paper = del_digit_gradient(z, y, "code")[0], del_digit_gradient(z, y, "paper")[0]
    assert code[0].item() == pytest.approx(-0.005) and code[1:].tolist() == pytest.approx([0.005] * 9)
    assert paper[0].item() == pytest.approx(-0.909) and paper[1:].tolist() == pytest.approx([0.101] * 9)
    assert target_push(z, y, "code").item() > 0 and target_push(z, y, "paper").item() > 0


def test_low_raw_logits_make_the_code_form_push_the_target_down():
    """z_k = -8, z_y = -6 (p_y = e^2 / (e^2 + 9) = 0.4509): b_y = softplus(6) = 6.0025 dwarfs the others'
    softplus(-8) = 0.0003, B = 0.4509 * 6.0025 = 2.7064, sigmoid(-6) = 0.0025, so
    g_y = 0.4509 (6.0025 - 2.7064 + 0.0025 - 1) / 10 = +0.1036: descent lowers z_y, and the target's
    probability falls. The same logits shifted by +10 (softmax unchanged) raise it; the paper form
    raises it in both, by the same amount."""
    z, y = torch.full((1, 10), -8.0), torch.tensor([3])
    z[0, 3] = -6.0
    p_y = math.exp(2) / (math.exp(2) + 9)
    b_y, b_k = math.log1p(math.exp(6)), math.log1p(math.exp(-8))
    big_b = p_y * b_y + (1 - p_y) * b_k
    want = p_y * (b_y - big_b + 1 / (1 + math.exp(6)) - 1) / 10
    assert del_digit_gradient(z, y, "code")[0, 3].item() == pytest.approx(want, rel=1e-5)
    assert want == pytest.approx(0.10363, rel=1e-3)
    assert target_push(z, y, "code").item() < 0 < target_push(z + 10, y, "code").item()
    paper = target_push(z, y, "paper").item()
    assert paper > 0 and target_push(z + 10, y, "paper").item() == pytest.approx(paper, rel=1e-6)


@pytest.mark.parametrize("form", ["code", "paper", "binary_entropy", "digit_ce"])
@pytest.mark.parametrize("shift", [-12.0, 0.0, 7.0])
def test_closed_form_equals_the_losss_own_gradient(form, shift):
    torch.manual_seed(0)
    z = torch.randn(64, 10) * 3 + shift
    y = torch.randint(0, 10, (64,))
    torch.testing.assert_close(del_digit_gradient(z, y, form), _autograd(z, y, form), rtol=1e-5, atol=1e-7)


def test_the_control_readings_by_hand():
    """z = 0, y = 0 (p_y = 0.1). digit_ce: g_y = 0.1 - 1 = -0.9, g_k = 0.1. binary entropy:
    c = ln(0.9 / 0.1) - 0.1 = 2.0972, g_y = c * 0.1 * 0.9 = +0.18875, g_k = c * 0.1 * (0 - 0.1) = -0.020972:
    descent lowers the target's logit -- eq. 8 read literally pushes a 10 % target down."""
    z, y = torch.zeros(1, 10), torch.tensor([0])
    ce, be = del_digit_gradient(z, y, "digit_ce")[0], del_digit_gradient(z, y, "binary_entropy")[0]
    assert ce[0].item() == pytest.approx(-0.9) and ce[1:].tolist() == pytest.approx([0.1] * 9)
    c = math.log(9) - 0.1
    assert be[0].item() == pytest.approx(c * 0.09, rel=1e-6) and be[1:].tolist() == pytest.approx([-c * 0.01] * 9)
    assert target_push(z, y, "binary_entropy").item() < 0 < target_push(z, y, "digit_ce").item()


def test_binary_entropy_lowers_the_target_below_0_475_under_any_digit_mass():
    """Its push is -c p_y ((1 - p_y) - q (p_y - sum p^2)), c = ln((1 - p_y)/p_y) - 0.1: negative exactly
    where p_y < 1 / (1 + e^0.1) = 0.47502, whatever q; digit_ce and the paper form raise it everywhere."""
    torch.manual_seed(3)
    z = torch.randn(4000, 10, dtype=torch.float64) * 4
    y = torch.randint(0, 10, (4000,))
    p_y = torch.softmax(z, -1).gather(1, y[:, None])[:, 0]
    edge = 1 / (1 + math.exp(0.1))
    assert edge == pytest.approx(0.47502, abs=1e-5)
    keep = (p_y - edge).abs() > 1e-6
    for q in (1.0, 0.3, 0.01):
        push = target_push(z, y, "binary_entropy", q)
        assert torch.equal((push < 0)[keep], (p_y < edge)[keep])
        assert (target_push(z, y, "digit_ce", q) > 0).all()
    assert ((p_y < edge) & keep).sum() > 100 and ((p_y > edge) & keep).sum() > 100


def test_the_paper_form_never_lowers_the_target_and_ignores_shifts():
    """Its term is a decreasing function of p_y alone: every step raises p_y, under any digit mass q,
    and a uniform shift of the ten logits changes nothing. The code form lowers it somewhere."""
    torch.manual_seed(1)
    z = torch.randn(4000, 10) * 4
    y = torch.randint(0, 10, (4000,))
    for q in (1.0, 0.5, 0.01):
        assert (target_push(z, y, "paper", q) > 0).all()
    torch.testing.assert_close(del_digit_gradient(z - 9, y, "paper"), del_digit_gradient(z, y, "paper"))
    assert (target_push(z - 9, y, "code") < 0).any()
    assert not torch.allclose(del_digit_gradient(z - 9, y, "code"), del_digit_gradient(z, y, "code"))


def test_target_push_is_the_first_order_change_of_the_full_vocabulary_probability():
    """A small step -eta g on the digit columns of full-vocabulary logits moves log P(y) by eta x push."""
    torch.manual_seed(2)
    full = torch.randn(8, 30, dtype=torch.float64) * 2
    y = torch.randint(0, 10, (8,))
    zd = full[:, :10]
    q = torch.softmax(full, -1)[:, :10].sum(-1)
    eta = 1e-6
    for form in ("code", "paper", "binary_entropy", "digit_ce"):
        g = del_digit_gradient(zd, y, form)
        moved = full.clone()
        moved[:, :10] -= eta * g
        d = (torch.log_softmax(moved, -1) - torch.log_softmax(full, -1)).gather(1, y[:, None])[:, 0]
        torch.testing.assert_close(d / eta, target_push(zd, y, form, q), rtol=1e-4, atol=1e-8)


def test_the_docs_figure_curves():
    """experiments/del_gradient_figure.py: the paper form's curve is one for every shift; the code
    form's goes below zero at low raw logits only."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "del_fig", Path(__file__).resolve().parents[1] / "experiments" / "del_gradient_figure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.curves(n=50)
    assert (c[("paper", -8.0)][1] == pytest.approx(c[("paper", 8.0)][1], rel=1e-9))
    assert c[("code", -8.0)][1].min() < 0 < c[("code", 8.0)][1].min()
    assert (c[("paper", 0.0)][1] > 0).all()


def test_gradient_norm_split_is_linear_in_the_weight(tmp_path):
    """experiments/grad_norms.py (issue 40, item 5): the numeric term's gradient is the run's loss gradient less
    MLE's; on one model it scales with alpha exactly (x2 weight -> x2 norm, same direction), and MLE's own run
    has none. A split that mixed CE into the numeric part (or normalised by another count) would fail."""
    import importlib.util

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from numlearn.training.run import train

    spec = importlib.util.spec_from_file_location("grad_norms", REPO / "experiments" / "grad_norms.py")
    gn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gn)
    small = ["model.config.hidden_size=32", "model.config.intermediate_size=64", "model.config.num_hidden_layers=2",
             "model.config.num_attention_heads=2", "model.config.num_key_value_heads=2", "model.vocab_size=300",
             "data.n_train=200", "eval.teacher_forced.n=16", "train=smoke"]
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("config", overrides=[*small, f"paths.output_dir={tmp_path}/out", f"paths.cache_dir={tmp_path}/cache",
                                           "loss=del", "loss.alpha=0.5", "train.max_steps=3"])
    run = train(cfg)
    records = [{"instruction": "What is 12 + 30?", "output": "12 + 30 = 42. The answer is 42."},
               {"instruction": "What is 7.5 * 2?", "output": "7.5 * 2 = 15.0. The answer is 15."}]
    a = gn.gradient_parts(run / "final", run, records, 128)
    assert a["ce_check"] < 1e-6 and a["n_digits"] > 0 and a["ratio"] > 0
    conf = OmegaConf.load(run / "config.yaml")
    conf.loss.alpha = 1.0
    OmegaConf.save(conf, run / "config.yaml")
    b = gn.gradient_parts(run / "final", run, records, 128)
    assert b["ratio"] == pytest.approx(2 * a["ratio"], rel=1e-4) and b["cosine"] == pytest.approx(a["cosine"], abs=1e-4)
    assert b["grad_norm_ce"] == pytest.approx(a["grad_norm_ce"], rel=1e-6)
    conf.loss = {"name": "mle", "alpha": 0.0}
    OmegaConf.save(conf, run / "config.yaml")
    assert gn.gradient_parts(run / "final", run, records, 128)["grad_norm_numeric"] == pytest.approx(0.0, abs=1e-7)
