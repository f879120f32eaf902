"""numlearn losses inside other people's training loops.

| loop | entry point | exact under GA and processes |
|---|---|---|
| plain PyTorch / accelerate | ``numlearn.losses.step_counts`` + ``backward_scale`` (``examples/``) | yes |
| Hugging Face ``Trainer`` | ``numlearn.integrations.hf.NumlearnTrainer`` (or ``NumlearnTrainerMixin``) | yes |
| TRL ``SFTTrainer`` | ``numlearn.integrations.trl.NumlearnSFTTrainer`` | yes |
| ``Trainer(compute_loss_func=LossBridge(...))`` | refused when the step is larger than the micro-batch | -- |
"""
