"""The daemon's durable run store: SQLite in WAL mode, one owner per file."""
