"""CLI subcommands, one module each; each exports ``COMMANDS``."""
