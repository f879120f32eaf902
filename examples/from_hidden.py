"""The fused path: ``loss_fn.from_hidden(hidden, head, labels)`` is the same loss as
``loss_fn(lm_head(hidden), labels)``, value and gradient, without the [B, T, V] logits (cross-entropy
in chunks of target positions, the numeric term from the ten digit columns). ``linear_head(model)`` reads
the head off a Hugging Face model: weight, bias, and what it does to the logits (Granite's and Cohere's
scales, Gemma-2/3's soft cap); a bare weight tensor works too for a plain ``nn.Linear`` head.

    python examples/from_hidden.py
"""

import torch

from numlearn.integrations.hf import linear_head
from numlearn.losses import build_loss
from numlearn.testing import TEXTS, batch, model, tokenizer

tok = tokenizer()
loss_fn = build_loss("del", tok, alpha=1.28)
m = model(len(tok))
b = batch(tok, TEXTS)

out = m(input_ids=b["input_ids"], attention_mask=b["attention_mask"], output_hidden_states=True)
hidden = out.hidden_states[-1]  # after the final norm: lm_head(hidden) == out.logits
full = loss_fn(out.logits, b["labels"])
(g_full,) = torch.autograd.grad(full.loss, hidden, retain_graph=True)
fused = loss_fn.from_hidden(hidden, linear_head(m, chunk_size=16), b["labels"])
(g_fused,) = torch.autograd.grad(fused.loss, hidden)
print(f"loss: logits {full.loss.item():.6f}  fused {fused.loss.item():.6f}  (ce {fused.ce.item():.4f}, "
      f"aux {fused.aux.item():.4f})")
print(f"max |d loss / d hidden| difference = {float((g_full - g_fused).abs().max()):.2e}")
assert abs(full.loss.item() - fused.loss.item()) < 1e-5
torch.testing.assert_close(g_fused, g_full, rtol=1e-4, atol=1e-7)
