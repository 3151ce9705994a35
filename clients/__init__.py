"""What lctx reaches over the network, beside the model runtime (`checkpoints`): served models
behind OpenAI-compatible endpoints (`endpoint.py`: the EndpointEngine evaluators use like lctx's
own engine) and checkpoints fetched from the Hugging Face hub or a GGUF file (`pull.py`)."""
