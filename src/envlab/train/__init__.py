"""Training on envlab environments: ``envlab.train.trl`` (TRL's ``GRPOTrainer``) and
``envlab.train.policy`` (the trainer's model as an envlab agent).

Nothing heavy is imported here: torch, transformers, datasets and trl are imported inside the
functions that need them (``pip install 'envlab[train]'``).
"""
