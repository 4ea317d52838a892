"""The run: the checks before compute, the recorder the flow fills, resume, the console view, doctor, and the
pretrained tiny checkpoint (a training of its own)."""
