"""The leakage curves benchmark (``python -m benchmarks.leakage_curves``), by job: the
profiles and cells' sizes (:mod:`.profile`), the jobs run on the library's engines
(:mod:`.jobs`), the adaptive sigma sweeps and the collected rows (:mod:`.sweeps`), the report's
sections and figures (:mod:`.report`) and the prior-aware identification section
(:mod:`.identification`)."""
