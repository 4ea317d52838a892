"""Export: the Hugging Face folder assembled from torchtitan's save, and its four checks side by side (structure, round trip, load, parity)."""
