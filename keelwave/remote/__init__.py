"""The read side seen from outside: an HTTP client for the keelwave API, where
the CLI keeps its login, and the pieces of presentation the CLI and the TUI
share (folding a run's steps into loop bands, whose account a loop rests on,
human-friendly numbers)."""
