"""Heads that learn: small tasks, attention-only models and their training (notebook 06).

Read first: `tasks` (the two synthetic tasks, about 100 lines), then `models` (a committee of
heads and a two-layer attention-only model built from `mha_lib.pytorch.MultiHeadAttention`),
then `training` (one seeded loop for both). `circuits` reads what a trained head does off its
weights, `seed_sweep` repeats the trainings over many seeds and caches the summary in
`mha_lib/data/`, and `formation` draws heads forming during training.

A module per idea:
- `tasks`: `relations_batch` (previous, next and partner token) and `repeated_block_batch`
  (a block of random tokens, repeated: the induction task);
- `models`: `Committee` and `AttentionOnly`;
- `training`: `train_committee`, `train_induction` and the losses and accuracies they log;
- `circuits`: head scores (previous-token, duplicate-token, induction) and the QK and OV
  circuits with K- and Q-composition;
- `seed_sweep`: `run_sweep`, `load_sweep`, `sweep_claims` (`python -m mha_lib.toy.seed_sweep`
  regenerates the cached file);
- `formation`: attention strips over training steps and a slider through them.

Imports torch, so each module is imported by its full name
(`from mha_lib.toy.training import train_induction`); this package imports nothing itself.
The core never imports it.
"""
