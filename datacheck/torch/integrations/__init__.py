"""TrainingGuard inside trainers that own the training loop; each module imports its trainer.

``from datacheck.torch.integrations.lightning import GuardCallback`` (PyTorch Lightning) and
``from datacheck.torch.integrations.hf import GuardedTrainer`` (Hugging Face ``Trainer``). Neither
lightning nor transformers is a dependency of datacheck: importing this package imports
neither, and each module needs its trainer installed.

Both route the trainer's own ``optimizer.step()`` through a :class:`~datacheck.torch.TrainingGuard`
(:class:`~datacheck.torch.integrations._step.GuardedStep`): the trainer still runs forward,
backward, its gradient clipping, its AMP scaler and its scheduler; the guard decides whether the
weights move.
"""
