"""Privacy accounting for (sampled) Gaussian, Laplace and (eps, delta) releases.

Every event states how its batch was drawn and under which neighbouring relation it is
accounted (:mod:`accounting.relations`); a ledger keeps one relation. Pure mathematics
lives in :mod:`accounting.rdp`, :mod:`accounting.conversions`, :mod:`accounting.composition`
and :mod:`accounting.pld` (privacy loss distributions); the one stateful object is
:class:`PrivacyLedger`.
docs/accounting.md lists the papers behind every formula.

Importing the package imports every module of it (but :data:`NOT_IMPORTED`), so every event
type and accountant defined in ``accounting/`` is registered whichever module a user imports
first: a new event type is one module, with no import line to add here.
"""

from . import relations, schedules
from ._grid import round_sigmas
from .accountants import ACCOUNTANTS, Accountant, Tightest, register_accountant, supporting
from .allocation import RandomAllocation, allocation_epsilon_bounds
from .calibrate import calibrate_sigma, max_steps, scale_schedule
from .composition import (
    DP,
    RangeWarning,
    amplify_by_sampling,
    analytic_gaussian_epsilons,
    compose_advanced,
    compose_advanced_heterogeneous,
    compose_basic,
    gaussian_delta,
    gaussian_step_epsilon,
    joint_gaussian_multiplier,
    zcdp_gaussian,
    zcdp_sampled_gaussian_approx,
    zcdp_to_dp,
)
from .conversions import (
    DeltaResult,
    DPResult,
    NoPrivacyWarning,
    OrderGridWarning,
    dp_delta,
    log_moments,
    moments_epsilon,
    optimize_order,
    rdp_to_dp,
)
from .events import ApproxDP, Event, GaussianSchedule, Laplace, SampledGaussian
from .fixed_size import SampledWithoutReplacement
from .ledger import (
    APPROXIMATE_METHODS,
    METHODS,
    ConservativeEpsilon,
    EpsilonReport,
    PrivacyLedger,
    group_privacy_epsilon,
    parallel_epsilon,
)
from .pld import PLDBounds, pld_delta, pld_epsilon
from .prv import PRVBounds, PRVUnavailable, prv_epsilon
from .rdp import (
    DEFAULT_ORDERS,
    INTEGER_ORDERS,
    SeriesConvergenceWarning,
    rdp_gaussian,
    rdp_laplace,
    rdp_pure_dp,
    rdp_sgm,
    rdp_sgm_many,
)
from .registry import UnsupportedEventError, event_types, import_submodules, register_event
from .relations import RELATIONS, SAMPLINGS, convert_event
from .same_sample import SameBatch
from .shuffle import (
    ShuffleBounds,
    shuffle_epsilon_bounds,
    shuffle_epsilon_lower,
    shuffle_epsilon_upper,
    shuffle_sensitivity,
)
from .tightest import tightest_epsilon
from .tuning import SELECTION_RULES, HyperparameterSearch

#: modules ``import accounting`` does not import: ``__main__`` runs the command line
NOT_IMPORTED = ("__main__",)
import_submodules(__name__, __path__, skip=NOT_IMPORTED)

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "Tightest",
    "UnsupportedEventError",
    "event_types",
    "register_accountant",
    "register_event",
    "supporting",
    "APPROXIMATE_METHODS",
    "ConservativeEpsilon",
    "EpsilonReport",
    "RELATIONS",
    "SAMPLINGS",
    "convert_event",
    "group_privacy_epsilon",
    "relations",
    "DEFAULT_ORDERS",
    "DP",
    "DPResult",
    "DeltaResult",
    "ApproxDP",
    "RandomAllocation",
    "allocation_epsilon_bounds",
    "ShuffleBounds",
    "shuffle_epsilon_bounds",
    "shuffle_epsilon_lower",
    "shuffle_epsilon_upper",
    "shuffle_sensitivity",
    "Event",
    "GaussianSchedule",
    "INTEGER_ORDERS",
    "Laplace",
    "METHODS",
    "NoPrivacyWarning",
    "OrderGridWarning",
    "PLDBounds",
    "PRVBounds",
    "PRVUnavailable",
    "PrivacyLedger",
    "RangeWarning",
    "SampledGaussian",
    "SampledWithoutReplacement",
    "SameBatch",
    "HyperparameterSearch",
    "SELECTION_RULES",
    "SeriesConvergenceWarning",
    "amplify_by_sampling",
    "analytic_gaussian_epsilons",
    "calibrate_sigma",
    "compose_advanced",
    "compose_advanced_heterogeneous",
    "compose_basic",
    "dp_delta",
    "gaussian_delta",
    "gaussian_step_epsilon",
    "log_moments",
    "max_steps",
    "moments_epsilon",
    "optimize_order",
    "parallel_epsilon",
    "pld_delta",
    "pld_epsilon",
    "prv_epsilon",
    "rdp_gaussian",
    "rdp_laplace",
    "rdp_pure_dp",
    "rdp_sgm",
    "rdp_sgm_many",
    "rdp_to_dp",
    "round_sigmas",
    "scale_schedule",
    "schedules",
    "joint_gaussian_multiplier",
    "tightest_epsilon",
    "zcdp_gaussian",
    "zcdp_sampled_gaussian_approx",
    "zcdp_to_dp",
]
