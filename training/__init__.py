"""Training small decoders, beside the model runtime (`checkpoints`) it builds on: the demo
checkpoints every attention variant ships as (`train.py`: the loop, its log and the demo
configurations) and their training text, the passkey protocol's synthetic rows (`synthetic.py`)."""
