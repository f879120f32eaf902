"""Writes and executes notebooks/library_tutorial.ipynb (kept as code so it can be reviewed and
regenerated; the committed notebook holds the outputs of this machine's run):

    .venv/bin/python notebooks/make_library_tutorial.py
"""
from pathlib import Path

import nbclient
import nbformat as nbf

HERE = Path(__file__).resolve().parent
nb = nbf.v4.new_notebook()
cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))
code = lambda s: cells.append(nbf.v4.new_code_cell(s))

md("""# Add DEL to your fine-tune in 5 lines

`numlearn.losses` is the library part of numlearn: loss callables built from a tokenizer, that take
your logits and labels and return the loss plus what to log. This notebook trains a tiny model built
from a config (no download) on arithmetic strings, with MLE and with DEL, and reads the digit entropy
each loss logs. Everything runs on a CPU in seconds. Other loops: `examples/` (plain PyTorch,
accelerate, the HF `Trainer`, TRL's `SFTTrainer`, the fused `from_hidden` path).""")
code("""import warnings, torch
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bar, imported by transformers
from numlearn.testing import TEXTS, batch, model, tokenizer  # a one-token-per-character tokenizer, a 1-layer Llama
torch.manual_seed(0)
tok = tokenizer()
inputs = batch(tok, TEXTS)                   # input_ids, attention_mask, labels (-100 on padding)
print(TEXTS)""")
md("""## The five lines

Labels are the usual unshifted causal-LM labels (`labels_shifted=True` if yours already hold each
position's target). `alpha` is the weight of DEL's digit term relative to the step's mean digit
term; the paper's Qwen/DeepSeek scripts correspond to `alpha=1.28`
(`numlearn.losses.effective_weight` converts the official scripts' weights).""")
code("""from numlearn.losses import build_loss
loss_fn = build_loss("del", tok, alpha=1.28)                         # 1. the loss, from your tokenizer
m = model(len(tok))
out = loss_fn(m(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits,
              inputs["labels"])                                      # 2. your logits and labels
out.loss.backward()                                                  # 3. train as usual
print(f"loss {out.loss.item():.4f} = ce {out.ce.item():.4f} + aux {out.aux.item():.4f}")   # 4. the two terms
print({k: round(float(v), 4) for k, v in out.stats.items()})         # 5. what it logs""")
md("""## What it logs while training: MLE against DEL

`stats` holds the digit targets' accuracy and the entropy (nats) of the model's distribution over
the ten digit tokens at those positions. Each loss trains the same model from the same seed for 60
full-batch Adam steps.""")
code("""def train(name, steps=60, **options):
    fn = build_loss(name, tok, **options)
    m = model(len(tok), seed=0)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    log = []
    for step in range(steps):
        out = fn(m(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits, inputs["labels"])
        opt.zero_grad(); out.loss.backward(); opt.step()
        log.append({"step": step + 1, "ce": out.ce.item(), "aux": out.aux.item(),
                    **{k: float(v) for k, v in out.stats.items()}})
    return log

logs = {"mle": train("mle"), "del": train("del", alpha=1.28)}
for name, log in logs.items():
    first, last = log[0], log[-1]
    print(f"{name}: ce {first['ce']:.3f} -> {last['ce']:.3f}, digit entropy {first['digit_entropy']:.3f} -> "
          f"{last['digit_entropy']:.3f} nats, digit accuracy {first['digit_acc']:.2f} -> {last['digit_acc']:.2f}")""")
code("""import matplotlib.pyplot as plt
%matplotlib inline
fig, ax = plt.subplots(1, 2, figsize=(9, 3))
for name, log in logs.items():
    ax[0].plot([r["step"] for r in log], [r["digit_entropy"] for r in log], label=name)
    ax[1].plot([r["step"] for r in log], [r["ce"] for r in log], label=name)
ax[0].set(xlabel="step", ylabel="digit entropy (nats)"); ax[1].set(xlabel="step", ylabel="cross-entropy")
ax[0].legend(); fig.tight_layout()""")
md("""## With gradient accumulation

Each micro-batch must be normalised by the whole step's counts, or the numeric term's weight changes
with the accumulation factor. `step_counts` computes them (and all-reduces them across processes
when given `all_reduce=`); `step=counts` passes them. Four micro-batches of two then give
the gradient of one batch of eight:""")
code("""from numlearn.losses import step_counts
micro = [batch(tok, TEXTS[i:i + 2]) for i in range(0, 8, 2)]
counts = step_counts(micro, loss_fn)
print(counts)
ref, acc = model(len(tok)), model(len(tok))
loss_fn(ref(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits, inputs["labels"]).loss.backward()
for mb in micro:
    loss_fn(acc(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits, mb["labels"],
            step=counts).loss.backward()
diff = max((a.grad - r.grad).abs().max().item() for a, r in zip(acc.parameters(), ref.parameters()))
print(f"max |grad(4 x 2) - grad(1 x 8)| = {diff:.1e}")""")
md("""## In a trainer

- Hugging Face: `NumlearnTrainer(model=..., args=..., train_dataset=..., loss_fn=loss_fn)`
  (`numlearn.integrations.hf`), or `NumlearnTrainerMixin` on your own `Trainer` subclass.
- TRL: `NumlearnSFTTrainer(..., loss_fn=loss_fn, fused_linear=True)` (`numlearn.integrations.trl`).
- accelerate: multiply the loss by `numlearn.losses.backward_scale(accelerator)` (see `examples/accelerate_loop.py`).""")

nb["cells"] = cells
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
if __name__ == "__main__":
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    nbf.write(nb, HERE / "library_tutorial.ipynb")
    print("wrote", HERE / "library_tutorial.ipynb")
