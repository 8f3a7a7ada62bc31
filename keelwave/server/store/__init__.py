"""How rows reach PostgreSQL and stay consistent there: the group-commit writer, its
lanes and SQL, rollups, finishing runs and the reaper. Never imports aiohttp."""
