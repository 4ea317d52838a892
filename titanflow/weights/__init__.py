"""Weights: resolving a run's Hugging Face folder (embedded, local, Hub) and building the pretrained tiny checkpoints."""
