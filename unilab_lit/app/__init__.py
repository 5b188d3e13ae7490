"""The application layer: the command line, config errors, resume, and using a trained policy."""
