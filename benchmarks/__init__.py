"""The benchmark scripts, one per table: run them as ``python -m benchmarks.<name>`` from the
repository root (``make results`` runs the quick profiles). They use the public API of
``accounting`` and ``leakaudit`` only."""
