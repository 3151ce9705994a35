"""The sequential effective-length search (docs/protocols/sequential.md): an option of the
passkey, needle and RULER tasks, not a task of its own (no REGISTER). Importing this
package imports nothing: `options` is pydantic only, `rule`/`search` need numpy, `runner`
is run_evaluator's hook."""
