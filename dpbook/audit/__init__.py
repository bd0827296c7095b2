"""Empirical privacy auditing: does a method's release leak no more than it is charged?

- :mod:`dpbook.audit.statistics`: Clopper-Pearson bounds, epsilon and mu lower bounds, Steinke et al.'s one-run bound;
- :mod:`dpbook.audit.scenarios`: the canary and the worst-case state of every registered method, as each declares it;
- :mod:`dpbook.audit.worlds`: the two worlds, D and D' = D plus the canary, played for T steps of one method instance;
- :mod:`dpbook.audit.sweep`: the canary's noise-free effect over norms and directions, and the worst canary;
- :mod:`dpbook.audit.white_box`: the white-box audit of one or several steps through each method's own releases;
- :mod:`dpbook.audit.parallel`: several audits at once, one process each (``--jobs``);
- :mod:`dpbook.audit.broken`: deliberately broken methods, registered here only, that the audit must flag, and a
  broken sampler;
- :mod:`dpbook.audit.sampling`: is the sampler Poisson? A statistical test of the batches it draws;
- :mod:`dpbook.audit.one_run`: the audit of a whole training run with many canaries (Steinke et al. 2023);
- result files through :func:`dpbook.io.resumable` (a rerun resumes, and never replaces another audit's);
- ``python -m dpbook.audit`` and ``python -m dpbook.audit.one_run``: the command lines.
"""

__all__ = ["AuditResult", "CONFIDENCE", "audit", "certify", "one_run_epsilon"]

from dpbook.audit.statistics import CONFIDENCE, certify, one_run_epsilon
from dpbook.audit.white_box import AuditResult, audit
