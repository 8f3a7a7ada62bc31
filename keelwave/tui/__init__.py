"""The Textual run explorer (`keelwave tui`). Not built yet: see issue 5."""
