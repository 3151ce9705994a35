"""A model served elsewhere, behind an OpenAI-compatible endpoint, run by evaluators as
lctx's own engine is. One module per job, each imported by name (this package imports
nothing, so the light ones stay light):

- `options`: EndpointOptions (a served model's settings, declared once; pydantic only) and
  EndpointSpec (a registration as the client holds it);
- `client`: which URLs may be called (the allow-list) and the retrying HTTP client that
  masks the API key in every answer;
- `dialects`: how vLLM, SGLang and OpenAI's echo are asked for prompt log-probabilities
  (one `Dialect` row each), the thinking switches;
- `probe`: what a server serves and can do (`Capabilities`), asked before any request;
- `tokenizer`: the served model's tokenizer, a local folder or the server's /tokenize
  (`ServerTokenizer`);
- `engine`: ServedModel (`connect`) and EndpointEngine, the engine's three calls over it."""
