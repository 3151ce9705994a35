"""A model served elsewhere, behind an OpenAI-compatible endpoint: `engine` (ServedModel,
EndpointEngine, the probe, the server tokenizer) and `options` (its settings, pydantic only).
Imports nothing itself, so `options` stays light."""
