"""Losses declare what they can do (numlearn.losses.capabilities); every declaration agrees with the
loss's behaviour, and no code outside losses/ decides a capability by a loss's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from numlearn.losses import LOSSES, TokenizerDigitError, build_loss, capabilities

SRC = Path(__file__).resolve().parents[1] / "src" / "numlearn"
def _options(name: str) -> dict:
    """A weight for every loss with a numeric term (declared by the loss, not listed here)."""
    return {"alpha": 0.1} if capabilities(name).numeric_term else {}


def test_the_declared_table():
    table = {n: capabilities(n) for n in LOSSES}
    assert {n for n, c in table.items() if c.linear_form} == {"mle", "ntl", "dist2", "del", "mixce"}
    assert {n for n, c in table.items() if c.needs_digit_vocab} == {"ntl", "dist2", "del"}
    assert {n for n, c in table.items() if c.needs_model_embeddings} == {"emo"}
    assert {n for n, c in table.items() if c.numeric_term} == {"ntl", "dist2", "del"}
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        capabilities("nope")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_declaration_is_what_the_loss_does(name, tiny_tokenizer, spacey_number_tokenizer):
    caps = capabilities(name)
    loss = build_loss(name, tiny_tokenizer, **_options(name))
    assert hasattr(loss, "from_hidden") == caps.linear_form
    logits = torch.randn(1, 4, len(tiny_tokenizer))
    labels = torch.tensor([[-100, 5, 6, 7]])
    if caps.needs_model_embeddings:
        with pytest.raises(ValueError, match="output embedding"):
            loss(logits, labels)
    else:
        assert torch.isfinite(loss(logits, labels).loss)
    if caps.needs_digit_vocab:  # no single-digit tokens and no pure number tokens: refused
        with pytest.raises(TokenizerDigitError, match="Number tokens:"):
            build_loss(name, spacey_number_tokenizer, **_options(name))
    else:
        assert build_loss(name, spacey_number_tokenizer, **_options(name)).vocab is None


def test_no_code_outside_losses_decides_by_a_loss_name():
    """A comparison with a loss name (``name in ("mixce", "emo")``, ``loss == "del"``) outside
    losses/ is a capability known by name. Not checked: reporting, where a loss name is the label a
    result file carries (table order, the MLE baseline), and reporting imports nothing of losses."""
    names = set(LOSSES)
    hits = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        if rel.parts[0] == "losses":
            continue
        tree = ast.parse(f.read_text())
        # module-level name lists (LOGITS_ONLY = ("mixce", "emo")) count as their strings
        lists = {t.id: [c.value for c in ast.walk(n.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                 for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            consts = [c.value for side in [node.left, *node.comparators] for c in ast.walk(side)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            consts += [v for side in [node.left, *node.comparators] for c in ast.walk(side)
                       if isinstance(c, ast.Name) for v in lists.get(c.id, [])]
            found = set(consts) & names
            if found and rel.parts[0] != "reporting":
                hits.append(f"{rel}:{node.lineno} compares with {sorted(found)}")
    assert not hits, hits
