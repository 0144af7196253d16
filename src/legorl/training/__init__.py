"""Training: the objectives' losses (GSPO, GRPO, Dr. GRPO, DAPO, CISPO; their registry and the advantage
estimators: legorl.objectives), logprob recompute, the trainer, checkpoints, the supervised warm start."""

from legorl.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LossConfig": "legorl.training.gspo",
        "sample_loss": "legorl.training.gspo",
        "group_advantages": "legorl.training.gspo",
        "sample_weights": "legorl.training.gspo",
        "register_policy_loss": "legorl.objectives",
        "register_advantage": "legorl.objectives",
        "compute_token_logprobs": "legorl.training.logprobs",
        "Trainer": "legorl.training.trainer",
        "LoopTrainer": "legorl.training.interface",
    },
)
