"""Training: GSPO/GRPO losses, logprob recompute, the trainer, checkpoints."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LossConfig": "legorl.training.gspo",
        "sample_loss": "legorl.training.gspo",
        "group_advantages": "legorl.training.gspo",
        "compute_token_logprobs": "legorl.training.logprobs",
        "Trainer": "legorl.training.trainer",
    },
)
