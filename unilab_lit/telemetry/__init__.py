"""What a run reports: metric keys, trace spans and files, loggers, videos, log limits.

Only light modules are imported here; the collector child imports ``tracing`` from this package.
"""
