"""The web dashboard, served by `keelwave serve` at `/`. Not built yet: see issue 6."""
