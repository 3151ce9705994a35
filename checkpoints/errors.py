"""Errors of the model runtime. Each message says what was wrong and what to do."""


class CheckpointError(Exception):
    """Base class for everything the runtime refuses."""


class ConfigError(CheckpointError, ValueError):
    """A config.json (or a RoPE override) that cannot describe a model we run."""


class LoadError(CheckpointError):
    """Weights that are missing, mis-shaped, or in a format we refuse to read."""


class OutsideCheckpoint(LoadError):
    """A file the checkpoint names (a shard in the index) that lies outside its folder."""


class EndpointError(CheckpointError):
    """A served model that cannot be used as registered (bad URL, unknown model, a request
    it cannot serve)."""


class EndpointUnavailable(EndpointError):
    """The server stayed down (or kept failing) through every retry: not the caller's input."""



class NotAServer(EndpointError):
    """Nothing answers at the URL as an OpenAI-compatible server does (no answer, not HTTP, an
    HTTP error, no model list). Its message says which, for a person probing from their own
    machine; the service answers every such case alike (a port scan learns nothing) and logs it."""
