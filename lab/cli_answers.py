"""Subcommands (filled in by their issue)."""


def add_parsers(sub) -> None:
    return None
