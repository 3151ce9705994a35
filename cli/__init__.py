"""The `lctx` command. `cli.main` builds the parser from the command groups, each a
module exposing `register(subparsers)`, so each group can grow without touching the
others. Building the parser imports nothing heavy: torch, Ray and the service are
imported inside the commands that use them, so `lctx --help` and the client commands
(`submit`, `status`, `results`, `checkpoints`) start in a fraction of a second."""
