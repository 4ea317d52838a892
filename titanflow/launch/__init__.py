"""Launch: the rendered job and torchrun line, the process runner, the compile warm-up, training and its metrics."""
