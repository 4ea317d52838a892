"""Weights: resolving a run's Hugging Face folder (embedded, local, Hub), checking a pretrained
checkpoint before launch, and building the pretrained tiny checkpoints."""
