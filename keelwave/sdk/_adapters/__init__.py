"""Provider adapters: wrap an OpenAI or Anthropic client so each model call is recorded.

The adapters patch the client object they are given (and return it), so its
type, its other methods and its configuration stay exactly as they were.
They import nothing from the provider packages: they work with whatever
version of the client object they receive, reading usage fields by name.

They depend on the run context and on the run module, never on the SDK's
client: ``Keelwave.wrap_openai`` / ``wrap_anthropic`` hand them its send
function. This package imports nothing itself, so using one adapter never
loads the other.
"""
