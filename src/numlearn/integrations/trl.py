"""TRL's ``SFTTrainer`` training a numlearn loss: ``NumlearnSFTTrainer(model=..., args=SFTConfig(...),
train_dataset=..., loss_fn=build_loss("del", tokenizer, alpha=1.28))``.

Exact under gradient accumulation and several processes (``NumlearnTrainerMixin``); the loss is
computed in ``compute_loss`` (TRL 1.16 deprecates ``compute_loss_func``, which also costs a second,
no-grad forward per step). ``fused_linear=True`` computes it from the decoder's hidden states
(``loss_fn.from_hidden``, the last position's logits only). TRL's batches work as they come: padded
or padding-free (``padding_free=True``, packing: TRL masks each sequence's first label, so no
prediction and no number span crosses two sequences), completion-only and ``assistant_only_loss``
(both arrive as -100 labels). TRL's own ``entropy`` / ``mean_token_accuracy`` metrics are not
computed (they need its fused head's outputs); ``loss/ce``, ``loss/aux`` and the digit statistics
are logged instead. Tested at both ends of the ``trl`` extra's range (1.15 and the newest; ``make test-core``).
"""

from __future__ import annotations

try:
    from trl import SFTTrainer
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("numlearn.integrations.trl needs TRL: pip install 'numlearn[trl]'") from e

from numlearn.integrations.hf import LossBridge, NumlearnTrainerMixin

__all__ = ["LossBridge", "NumlearnSFTTrainer"]


class NumlearnSFTTrainer(NumlearnTrainerMixin, SFTTrainer):
    """``trl.SFTTrainer`` with a numlearn loss (``loss_fn=`` or ``loss_bridge=``)."""
