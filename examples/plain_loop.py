"""DEL in a plain PyTorch loop with gradient accumulation: 4 micro-batches of 2 give the gradient of
one batch of 8, because every micro-batch is normalised by the step's counts.

    python examples/plain_loop.py
"""

from numlearn.losses import build_loss, step_counts
from numlearn.testing import TEXTS, batch, grads, model, tokenizer

tok = tokenizer()
loss_fn = build_loss("del", tok, alpha=1.28)

big = model(len(tok))
b = batch(tok, TEXTS)
loss_fn(big(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"]).loss.backward()

m = model(len(tok))
micro = [batch(tok, TEXTS[i : i + 2]) for i in range(0, len(TEXTS), 2)]
counts = step_counts(micro, loss_fn)  # the step's trained tokens and digit targets
for mb in micro:
    out = loss_fn(m(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits, mb["labels"],
                  step=counts)
    out.loss.backward()
    print(f"ce {float(out.ce):.4f}  aux {float(out.aux):.4f}  digit entropy {float(out.stats['digit_entropy']):.3f}")
diff = float((grads(m) - grads(big)).abs().max())
print(f"max |grad(4 x 2) - grad(1 x 8)| = {diff:.2e}")
assert diff < 1e-5
