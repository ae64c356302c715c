"""The layered digital twin: configuration (control, dynamics, rendering), system identification,
gap attribution and ranking stability under asset swaps.

May import ``assay.spec``, ``assay.sim``, ``assay.policies``, ``assay.store``, ``assay.metrics``,
``assay.failures`` and ``assay.run``.
"""

from assay.errors import TwinError
from assay.twin.attribution import Attribution, ConfigScore, LayerShare, attribute, configurations
from assay.twin.config import (
                               Layer,
                               Twin,
                               layer_of,
                               load_twin,
                               nominal_twin,
                               save_twin,
                               twin_from_values,
                               twin_of_record,
)
from assay.twin.rendering import (
                               DEFAULT_RENDERING,
                               DEFAULT_TRACE_TOLERANCE,
                               RenderingFit,
                               TraceReplay,
                               calibrate_rendering,
                               rendering_twin,
)
from assay.twin.running import (
                               TwinSettings,
                               content_campaign,
                               run_twins,
                               settings_from_campaign,
                               unique_twins,
                               write_results_csv,
)
from assay.twin.stability import StabilityReport, SwapResult, asset_stability, swap_twins
from assay.twin.sysid import (
                               DEFAULT_MAX_EVALUATIONS,
                               DEFAULT_PARAMETERS,
                               DEFAULT_TOLERANCE,
                               OpenLoopReplay,
                               SysIdResult,
                               Trajectory,
                               calibrated_twin,
                               identify,
                               trajectories_from_store,
)
from assay.twin.trajectory_gap import TrajectoryAttribution, TrajectoryLayer, trajectory_attribution

__all__ = [
    "Attribution", "ConfigScore", "DEFAULT_MAX_EVALUATIONS", "DEFAULT_PARAMETERS", "DEFAULT_RENDERING",
    "DEFAULT_TOLERANCE", "DEFAULT_TRACE_TOLERANCE", "RenderingFit", "TraceReplay",
    "calibrate_rendering", "rendering_twin", "Layer", "LayerShare", "OpenLoopReplay", "StabilityReport",
    "SwapResult", "SysIdResult", "Trajectory", "TrajectoryAttribution", "TrajectoryLayer", "trajectory_attribution",
    "Twin", "TwinError", "TwinSettings", "asset_stability", "attribute",
    "calibrated_twin", "configurations", "content_campaign", "identify", "layer_of", "load_twin", "nominal_twin",
    "run_twins",
    "save_twin", "settings_from_campaign", "swap_twins", "trajectories_from_store", "twin_from_values",
    "twin_of_record", "unique_twins", "write_results_csv",
]
